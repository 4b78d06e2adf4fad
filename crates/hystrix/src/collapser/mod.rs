//! The request collapser (Hystrix's `HystrixCollapser`): requests for one item each,
//! made within a short window, are batched into one call of a batch command, and the batch's
//! response is mapped back to each request.
//!
//! ```
//! use hystrix::collapser::{Collapser, CollapserEvent, CollapserScope};
//! use hystrix::testing::TestRegistry;
//! use hystrix::{Command, IsolationStrategy};
//! use std::collections::HashMap;
//!
//! let test = TestRegistry::new(); // a registry on a manual clock
//! // The batch command: one backend call for many ids.
//! let get_ratings = Command::builder("GetRatings")
//!     .group("Ratings")
//!     .isolation(IsolationStrategy::Semaphore)
//!     .build_in(test.registry())?;
//! let rating = Collapser::builder("GetRating")
//!     .scope(CollapserScope::Global)
//!     .build(
//!         get_ratings,
//!         // The batch: all the ids of the window in one call.
//!         |ids: Vec<u32>| async move {
//!             Ok::<_, std::io::Error>(ids.iter().map(|&id| (id, id * 10)).collect::<HashMap<_, _>>())
//!         },
//!         // Each request's response, taken out of the batch's.
//!         |ratings: &mut HashMap<u32, u32>, id: &u32| ratings.remove(id),
//!     )?;
//!
//! let first = rating.queue(1); // both join the current batch
//! let second = rating.queue(2);
//! test.clock().advance_ms(10); // timerDelayInMilliseconds: the batch runs
//! let (first, second) = futures::executor::block_on(async { (first.await, second.await) });
//! assert_eq!((*first?, *second?), (10, 20));
//! assert_eq!(rating.metrics().cumulative_count(CollapserEvent::BatchExecuted), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! - **Windows**: the first request after an idle period starts a timer of
//!   `timerDelayInMilliseconds` (10 ms) on the registry's clock; each tick runs the batch if it
//!   holds a request, at a fixed rate, until a tick finds none. A batch that reaches
//!   `maxRequestsInBatch` (no limit by default) runs at once and the next request starts a new
//!   one.
//! - **The batch** runs as an async execution of the batch command (breaker, isolation,
//!   timeout, metrics; COLLAPSED × its size among its events) on the registry's executor. A
//!   batch of requests whose callers all left (dropped their futures) does not run.
//! - **Sharding** ([`CollapserBuilder::shard_by`]): a batch is split by a key of each argument
//!   into shards, each its own execution of the batch command; shards start in the order their
//!   first request joined the batch and run concurrently; one shard's failure never touches
//!   another's requests.
//! - **Mapping**: the map function gives each request's response out of the batch's; a request
//!   it gives none gets [`FailureType::CollapserMissingResponse`]; a panic in it gives the
//!   requests not answered yet that error. A failed batch (error, timeout, short-circuit,
//!   rejection) gives each request its error, or the per-request fallback's value
//!   ([`CollapserBuilder::fallback`]).
//! - **Duplicates**: with `requestCache.enabled` (default true) requests for equal arguments in
//!   one batch share one slot (one argument in the batch, one response for all); with it
//!   false each request is its own slot. With a cache-key function
//!   ([`CollapserBuilder::cache_key`]) responses are also shared within a request context, as
//!   the command request cache does (RESPONSE_FROM_CACHE on the collapser's metrics).
//! - **Scope**: [`CollapserScope::Request`] (the default, as Hystrix) batches the requests of
//!   one [`RequestContext`] and needs one
//!   ([`FailureType::NoRequestContext`] otherwise); its batches run in that context (their
//!   executions are in its request log). [`CollapserScope::Global`] batches every caller's
//!   requests together, and its batches run under no caller's context.
//!
//! Responses are shared behind `Arc` ([`SharedResponse`]), since duplicates and cache hits
//! share one.

mod batcher;
mod metrics;
mod stream;

use std::fmt;
use std::future::Future;
use std::hash::Hash;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use batcher::{AnswerOnDrop, BatchRunner, BatchSlot, Batcher, Limits, Slot};
pub(crate) use metrics::CollapserCounters;
pub use metrics::{CollapserEvent, CollapserMetrics};
pub use stream::{CollapsedItem, CollapsedStream, StreamCollapser};

use crate::command::{Classify, Command, ExecutionResult, panic_message};
use crate::config::{
    CollapserKind, CollapserLayer, CollapserProperties, PropertyCell, PropertyValue,
};
use crate::context::{
    CacheOwner, CachedOutcome, Carried, Lookup, RequestContext, SharedResponse, Wait, WeakContext,
};
use crate::error::{Cause, ConfigError, Detail, FailureType, HystrixError};
use crate::key::{CollapserKey, CommandKey};
use crate::registry::Env;

/// Which requests a collapser batches together (Hystrix's `Scope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum CollapserScope {
    /// The requests of one request context (Hystrix's default): a context must be current.
    #[default]
    Request,
    /// Every caller's requests, from any context or none.
    Global,
}

type ShardFn<A> = Arc<dyn Fn(&A) -> u64 + Send + Sync>;
type CacheKeyFn<A> = Arc<dyn Fn(&A) -> String + Send + Sync>;
type FallbackFn<A, R, E> = Arc<dyn Fn(&A, &HystrixError<E>) -> R + Send + Sync>;

/// Builds a [`Collapser`]; from [`Collapser::builder`].
#[must_use = "a builder does nothing until build()"]
pub struct CollapserBuilder<A, R, E> {
    key: String,
    scope: CollapserScope,
    layer: CollapserLayer,
    error: Option<ConfigError>,
    shard_by: Option<ShardFn<A>>,
    cache_key: Option<CacheKeyFn<A>>,
    fallback: Option<FallbackFn<A, R, E>>,
    missing_is_error: bool,
}

impl<A, R, E> fmt::Debug for CollapserBuilder<A, R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollapserBuilder")
            .field("key", &self.key)
            .field("scope", &self.scope)
            .finish_non_exhaustive()
    }
}

impl<A, R, E> CollapserBuilder<A, R, E> {
    /// The scope (default [`CollapserScope::Request`]).
    pub fn scope(mut self, scope: CollapserScope) -> Self {
        self.scope = scope;
        self
    }

    /// `timerDelayInMilliseconds`: the batching window (rounded up to whole ms; default 10 ms).
    pub fn timer_delay(self, delay: std::time::Duration) -> Self {
        self.property(
            "timerDelayInMilliseconds",
            crate::config::ceil_millis(delay),
        )
    }

    /// `maxRequestsInBatch`: a batch that reaches this many requests runs at once (default no
    /// limit); at least 1. Lowered at run time, it applies from the next request: a batch
    /// already holding more runs whole when that request arrives.
    pub fn max_requests_in_batch(self, max: u32) -> Self {
        self.property("maxRequestsInBatch", max)
    }

    /// Any collapser property by its Hystrix name (`hystrix.collapser.<Key>.<name>` without the
    /// prefix), at the level of a value given in code; a bad name or value makes
    /// [`build`](Self::build) fail with it.
    pub fn property(mut self, name: &str, value: impl Into<PropertyValue>) -> Self {
        let value = value.into();
        if self.error.is_none()
            && let Err(err) = self.layer.set(name, &value, true)
        {
            self.error = Some(crate::config::layer_error(
                err,
                &format!("hystrix.collapser.{}.{name}", self.key),
                &value,
            ));
        }
        self
    }

    /// Splits each batch into shards by `shard_of(argument)`: each shard is its own execution
    /// of the batch command (Hystrix's `shardRequests`).
    pub fn shard_by(mut self, shard_of: impl Fn(&A) -> u64 + Send + Sync + 'static) -> Self {
        self.shard_by = Some(Arc::new(shard_of));
        self
    }

    /// Shares responses within a request context by `cache_key(argument)` (Hystrix's
    /// collapser `getCacheKey()`), while `requestCache.enabled`: a later request with the same
    /// cache key gets the first one's response without joining a batch. Needs a request
    /// context ([`FailureType::NoRequestContext`] otherwise), in either scope. Not used by a
    /// [`StreamCollapser`] (each request there has its own stream).
    pub fn cache_key(mut self, cache_key: impl Fn(&A) -> String + Send + Sync + 'static) -> Self {
        self.cache_key = Some(Arc::new(cache_key));
        self
    }

    /// For a [`StreamCollapser`]: a request that no value of its batch is for gets
    /// [`FailureType::CollapserMissingResponse`] instead of an empty stream (Hystrix's
    /// `onMissingResponse` raising an error).
    pub fn missing_response_is_error(mut self) -> Self {
        self.missing_is_error = true;
        self
    }

    /// The per-request fallback: when the batch fails (its error, timeout, short-circuit or
    /// rejection), each request gets `fallback(argument, &error)` instead of the error. A
    /// fallback that panics leaves that request the error.
    pub fn fallback(
        mut self,
        fallback: impl Fn(&A, &HystrixError<E>) -> R + Send + Sync + 'static,
    ) -> Self {
        self.fallback = Some(Arc::new(fallback));
        self
    }
}

impl<A, R, E> CollapserBuilder<A, R, E>
where
    A: Clone + Hash + Eq + Send + Sync + 'static,
    R: Send + Sync + 'static,
    E: Send + Sync + 'static,
{
    /// Builds the collapser, whose batches run as executions of `command` (in its registry):
    /// `batch` makes the call for a batch's arguments (in the order their requests joined),
    /// and `map` takes each request's response out of the batch's response (`None`: none for
    /// this argument).
    ///
    /// A collapser key is one collapser per registry, as in Hystrix (where a collapser object
    /// is made per request and batches with the others of its key): a later build with the
    /// same key shares the first's batches and runs them with the first's command and
    /// functions (batch, map, shard, cache key, fallback); its property values join the key's.
    ///
    /// # Errors
    /// [`ConfigError`] for an invalid collapser key or property (named with the reason), or a
    /// conflict with another definition of this key: a different property value, scope, or
    /// argument, response or error type.
    pub fn build<C, F, Fut, B, M>(
        self,
        command: Command<C>,
        batch: F,
        map: M,
    ) -> Result<Collapser<A, R, E>, ConfigError>
    where
        C: Classify<E> + Clone + Send + Sync + 'static,
        F: Fn(Vec<A>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<B, E>> + Send + 'static,
        B: Send + 'static,
        M: Fn(&mut B, &A) -> Option<R> + Send + Sync + 'static,
    {
        let fallback = self.fallback.clone();
        let core = self.core(&command)?;
        let runner: Arc<dyn BatchRunner<Slot<A, R, E>>> = Arc::new(Runner {
            core: Arc::clone(&core),
            command,
            batch,
            map,
            fallback,
            _types: PhantomData,
        });
        Ok(Collapser {
            parts: Parts::shared(core, runner, std::any::type_name::<(A, R, E)>())?,
        })
    }
}

impl<A, R, E> CollapserBuilder<A, R, E> {
    /// Checks the key and properties, and registers them in `command`'s registry.
    fn core<C>(self, command: &Command<C>) -> Result<Arc<Core<A>>, ConfigError> {
        let key = CollapserKey::new(&self.key)?;
        if let Some(err) = self.error {
            return Err(err);
        }
        let env = Arc::clone(&command.state_arc().env);
        let properties = env.properties.register_collapser(&key, self.layer)?;
        let counters = env.collapser_counters(&key, &properties.load());
        Ok(Arc::new(Core {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            key,
            scope: self.scope,
            env,
            properties,
            counters,
            shard_by: self.shard_by,
            cache_key: self.cache_key,
        }))
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// What a collapser is, whatever its functions' types.
struct Core<A> {
    /// Tells this collapser's batchers apart among a context's request variables.
    id: u64,
    key: CollapserKey,
    scope: CollapserScope,
    env: Arc<Env>,
    properties: Arc<PropertyCell<CollapserKind>>,
    counters: Arc<CollapserCounters>,
    shard_by: Option<ShardFn<A>>,
    cache_key: Option<CacheKeyFn<A>>,
}

impl<A> Core<A> {
    /// What the batcher reads now from the properties.
    fn limits(&self) -> Limits {
        let props = self.properties.load();
        Limits {
            max_requests: usize::try_from(props.max_requests_in_batch).unwrap_or(usize::MAX),
            timer_delay_ms: props.timer_delay_in_milliseconds,
            share_duplicates: props.request_cache_enabled,
        }
    }

    /// A batch starts: the slots still wanted, counted and split into shards; `None` if every
    /// request left (nothing runs).
    fn start_batch<S: BatchSlot<A>>(&self, batch: Vec<Arc<S>>) -> Option<Vec<Vec<Arc<S>>>> {
        let batch: Vec<_> = batch.into_iter().filter(|slot| slot.is_wanted()).collect();
        if batch.is_empty() {
            return None;
        }
        let now_ms = self.env.clock.now_ms();
        let sizes = self.properties.load().metrics_rolling_percentile_enabled;
        self.counters.batch(now_ms, batch.len(), sizes);
        let added = u32::try_from(batch.len()).unwrap_or(u32::MAX);
        self.counters
            .add(now_ms, CollapserEvent::AddedToBatch, added);
        let shards = shards(batch, self.shard_by.as_deref());
        for shard in &shards {
            self.counters.shard(now_ms, shard.len(), sizes);
        }
        Some(shards)
    }

    fn metrics(&self) -> CollapserMetrics {
        let sizes = self.properties.load().metrics_rolling_percentile_enabled;
        self.counters
            .snapshot(&self.key, self.env.clock.now_ms(), sizes)
    }
}

/// A collapser's parts whatever its kind of slot `S`: what it is, how its batches run, and
/// the batcher of a GLOBAL collapser.
struct Parts<A, S> {
    core: Arc<Core<A>>,
    runner: Arc<dyn BatchRunner<S>>,
    global: Option<Arc<Batcher<A, S>>>,
}

impl<A, S> Clone for Parts<A, S> {
    fn clone(&self) -> Self {
        Parts {
            core: Arc::clone(&self.core),
            runner: Arc::clone(&self.runner),
            global: self.global.clone(),
        }
    }
}

impl<A, S> Parts<A, S>
where
    A: Clone + Hash + Eq + Send + Sync + 'static,
    S: BatchSlot<A>,
{
    /// The parts of `core`'s key in its registry: those of the key's first definition (as
    /// Hystrix keeps one collapser per key), or these.
    fn shared(
        core: Arc<Core<A>>,
        runner: Arc<dyn BatchRunner<S>>,
        types: &'static str,
    ) -> Result<Self, ConfigError> {
        let env = Arc::clone(&core.env);
        let key = core.key.clone();
        env.collapser_parts(&key, core.scope, types, move || {
            let global = (core.scope == CollapserScope::Global)
                .then(|| Batcher::new(Arc::clone(&runner), None));
            Parts {
                core,
                runner,
                global,
            }
        })
    }

    /// The batcher a request joins now: the GLOBAL one, or that of `context` (made on its
    /// first use there).
    fn batcher<E>(
        &self,
        context: Option<&RequestContext>,
    ) -> Result<Arc<Batcher<A, S>>, HystrixError<E>> {
        let core = &self.core;
        match (&self.global, context) {
            (Some(global), _) => Ok(Arc::clone(global)),
            (None, Some(context)) => {
                let runner = Arc::clone(&self.runner);
                let weak = context.downgrade();
                context
                    .variable(core.id, move || Batcher::new(runner, Some(weak)))
                    .map(|batcher| Arc::clone(&*batcher))
                    .ok_or_else(|| other_type(core))
            }
            (None, None) => Err(no_context(
                core,
                "has REQUEST scope (batches one request's calls)",
            )),
        }
    }
}

/// A request collapser: see the [module docs](self). Cheap to clone; clones share their
/// batches (build one per collapser and share it).
pub struct Collapser<A, R, E> {
    parts: Parts<A, Slot<A, R, E>>,
}

impl<A, R, E> Clone for Collapser<A, R, E> {
    fn clone(&self) -> Self {
        Collapser {
            parts: self.parts.clone(),
        }
    }
}

impl<A, R, E> fmt::Debug for Collapser<A, R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Collapser")
            .field("key", &self.parts.core.key)
            .field("scope", &self.parts.core.scope)
            .finish_non_exhaustive()
    }
}

impl Collapser<(), (), ()> {
    /// Starts a collapser named `key` (its collapser key).
    pub fn builder<A, R, E>(key: impl Into<String>) -> CollapserBuilder<A, R, E> {
        CollapserBuilder {
            key: key.into(),
            scope: CollapserScope::default(),
            layer: CollapserLayer::default(),
            error: None,
            shard_by: None,
            cache_key: None,
            fallback: None,
            missing_is_error: false,
        }
    }
}

impl<A, R, E> Collapser<A, R, E>
where
    A: Clone + Hash + Eq + Send + Sync + 'static,
    R: Send + Sync + 'static,
    E: Send + Sync + 'static,
{
    /// Adds a request for `arg` to the current batch now (or answers it from the request
    /// cache) and returns its response's future. Dropping the future before its batch runs
    /// takes the request out (a batch whose requests all left does not run; a request in the
    /// collapser's request cache stays, for later requests that find it there).
    ///
    /// `queue` is eager: the request context is the one current when it is called, so open
    /// it around the call, e.g. `ctx.scope(async { collapser.queue(id).await })` (not
    /// `ctx.scope(collapser.queue(id))`, which calls `queue` before the scope opens).
    ///
    /// The future resolves to the request's response; errors:
    /// [`FailureType::NoRequestContext`] for a REQUEST-scoped collapser (or one with a
    /// cache-key function) with no context current; the batch's error (shared by its
    /// requests); [`FailureType::CollapserMissingResponse`] when the map function gave none;
    /// [`FailureType::Cancelled`] if the registry was shut down before the batch ran.
    pub fn queue(&self, arg: A) -> CollapsedFuture<R, E> {
        match self.submit(arg) {
            Ok(future) => future,
            Err(error) => CollapsedFuture::ready(Err(Arc::new(error))),
        }
    }

    /// As [`queue`](Self::queue), waiting on this thread for the response (the batch runs on
    /// the registry's executor when its window closes). Inside a multi-threaded tokio runtime
    /// the wait goes through `block_in_place`; inside a current-thread runtime it is refused
    /// ([`FailureType::Misuse`]: the batch could never run there); await `queue` instead.
    ///
    /// # Errors
    /// As [`queue`](Self::queue).
    pub fn execute(&self, arg: A) -> SharedResponse<R, E> {
        match crate::command::block_safely(|| crate::command::block_on(self.queue(arg))) {
            Ok(response) => response,
            Err(_) => Err(Arc::new(collapser_error(
                &self.parts.core,
                FailureType::Misuse,
                "(a collapser) was executed with a blocking execute() inside a current-thread \
                 tokio runtime, where its batch could never run; await queue() instead"
                    .to_owned(),
            ))),
        }
    }

    fn submit(&self, arg: A) -> Result<CollapsedFuture<R, E>, HystrixError<E>> {
        let core = &self.parts.core;
        let props = core.properties.load();
        let context = RequestContext::current();
        let mut claim = None;
        if let (Some(cache_key), true) = (&core.cache_key, props.request_cache_enabled) {
            let Some(context) = &context else {
                return Err(no_context(core, "has a cache-key function"));
            };
            let owner = CacheOwner::Collapser(core.key.clone());
            match context.cache().lookup(context, owner, &cache_key(&arg)) {
                None => return Err(other_type(core)),
                Some(Lookup::Hit(entry)) => {
                    core.counters.add(
                        core.env.clock.now_ms(),
                        CollapserEvent::ResponseFromCache,
                        1,
                    );
                    return Ok(CollapsedFuture::waiting(
                        entry.wait(),
                        None,
                        command_key(core),
                    ));
                }
                Some(Lookup::Miss(found)) => claim = Some(found),
            }
        }
        let batcher = self.parts.batcher(context.as_ref())?;
        // A cached request has its own entry (duplicates find it in the cache instead).
        let share = claim.is_none();
        let slot = batcher.submit(arg, claim, share);
        let wait = Arc::clone(&slot.entry).wait();
        Ok(CollapsedFuture::waiting(
            wait,
            Some(slot),
            command_key(core),
        ))
    }

    /// The collapser key.
    pub fn key(&self) -> &CollapserKey {
        &self.parts.core.key
    }

    /// The scope.
    pub fn scope(&self) -> CollapserScope {
        self.parts.core.scope
    }

    /// A snapshot of the collapser key's live properties.
    pub fn properties(&self) -> CollapserProperties {
        (**self.parts.core.properties.load()).clone()
    }

    /// A snapshot of the collapser key's metrics.
    pub fn metrics(&self) -> CollapserMetrics {
        self.parts.core.metrics()
    }
}

/// Runs the batches of one collapser: its typed batch command, batch and map functions.
struct Runner<A, R, E, C, F, M, Fut, B> {
    core: Arc<Core<A>>,
    command: Command<C>,
    batch: F,
    map: M,
    fallback: Option<FallbackFn<A, R, E>>,
    _types: PhantomData<fn() -> (Fut, B)>,
}

impl<A, R, E, C, F, M, Fut, B> BatchRunner<Slot<A, R, E>> for Runner<A, R, E, C, F, M, Fut, B>
where
    A: Clone + Hash + Eq + Send + Sync + 'static,
    R: Send + Sync + 'static,
    E: Send + Sync + 'static,
    C: Classify<E> + Clone + Send + Sync + 'static,
    F: Fn(Vec<A>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<B, E>> + Send + 'static,
    B: Send + 'static,
    M: Fn(&mut B, &A) -> Option<R> + Send + Sync + 'static,
{
    fn limits(&self) -> Limits {
        self.core.limits()
    }

    fn schedule(&self, deadline_ms: u64, tick: Box<dyn FnOnce() + Send>) {
        self.core.env.clock.schedule(deadline_ms, tick);
    }

    fn now_ms(&self) -> u64 {
        self.core.env.clock.now_ms()
    }

    fn run(self: Arc<Self>, batch: Vec<Arc<Slot<A, R, E>>>, context: Option<&WeakContext>) {
        // Requests whose callers all left stay out; if none is left, nothing runs.
        let Some(shards) = self.core.start_batch(batch) else {
            return;
        };
        let Some(executor) = self.core.env.executor() else {
            let error = Arc::new(cancelled(self.command.key()));
            for slot in shards.iter().flatten() {
                slot.deliver(shared_error(&error, ExecutionResult::empty()));
            }
            return;
        };
        let context = context.and_then(WeakContext::upgrade);
        for shard in shards {
            let this = Arc::clone(&self);
            let in_flight = self.core.env.eager_started();
            let task = Carried::capture(context.as_ref()).scope(async move {
                // Its COLLAPSED execution is logged with this collapser's key.
                let key = this.core.key.clone();
                crate::context::collapsing(key, this.run_shard(shard)).await;
                drop(in_flight);
            });
            executor.spawn(task);
        }
    }
}

impl<A, R, E, C, F, M, Fut, B> Runner<A, R, E, C, F, M, Fut, B>
where
    A: Clone + Send + Sync + 'static,
    R: Send + Sync + 'static,
    E: Send + Sync + 'static,
    C: Classify<E> + Clone + Send + Sync + 'static,
    F: Fn(Vec<A>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<B, E>> + Send + 'static,
    B: Send + 'static,
    M: Fn(&mut B, &A) -> Option<R> + Send + Sync + 'static,
{
    /// One execution of the batch command for `shard`, and each request's answer.
    async fn run_shard(&self, shard: Vec<Arc<Slot<A, R, E>>>) {
        let guard = AnswerOnDrop {
            slots: shard,
            key: self.command.key().clone(),
        };
        let shard = &guard.slots;
        let args: Vec<A> = shard.iter().map(|slot| slot.arg.clone()).collect();
        let collapsed = u32::try_from(shard.len()).unwrap_or(u32::MAX);
        let Ok(call) = catch_unwind(AssertUnwindSafe(|| (self.batch)(args))) else {
            let error = Arc::new(self.error_of("batch function panicked"));
            for slot in shard {
                slot.deliver(shared_error(&error, ExecutionResult::empty()));
            }
            return;
        };
        let (response, result) = self
            .command
            .run_async(call)
            .collapsed(collapsed)
            .execute_async_outcome()
            .await
            .into_parts();
        match response {
            Ok(mut batch) => self.map_responses(&mut batch, shard, result),
            Err(error) => {
                let error = Arc::new(error);
                for slot in shard {
                    let fallback = self.fallback.as_ref().and_then(|fallback| {
                        catch_unwind(AssertUnwindSafe(|| fallback(&slot.arg, &error))).ok()
                    });
                    slot.deliver(match fallback {
                        Some(value) => shared_value(value, result),
                        None => shared_error(&error, result),
                    });
                }
            }
        }
    }

    fn map_responses(&self, batch: &mut B, shard: &[Arc<Slot<A, R, E>>], result: ExecutionResult) {
        for (at, slot) in shard.iter().enumerate() {
            match catch_unwind(AssertUnwindSafe(|| (self.map)(batch, &slot.arg))) {
                Ok(Some(value)) => slot.deliver(shared_value(value, result)),
                Ok(None) => slot.deliver(shared_error(&Arc::new(self.missing_response()), result)),
                Err(panic) => {
                    let message = format!("map function panicked: {}", panic_message(panic));
                    let error = Arc::new(self.error_of(&message));
                    for slot in &shard[at..] {
                        slot.deliver(shared_error(&error, result));
                    }
                    return;
                }
            }
        }
    }

    fn missing_response(&self) -> HystrixError<E> {
        self.batch_error(
            FailureType::CollapserMissingResponse,
            format!(
                "gave no response for a request of collapser {}: its map function returned None \
                 for that argument",
                self.core.key
            ),
        )
    }

    fn error_of(&self, what: &str) -> HystrixError<E> {
        self.batch_error(
            FailureType::CommandException,
            format!("failed in collapser {}: its {what}", self.core.key),
        )
    }

    /// An error of the batch command's, with this message.
    fn batch_error(&self, failure: FailureType, message: String) -> HystrixError<E> {
        HystrixError::new(failure, self.command.key().clone(), Cause::None)
            .with_detail(Detail::Message(message.into()))
    }
}

/// Splits a batch into shards by `shard_of`, in the order each shard's first request joined.
fn shards<T, A>(
    batch: Vec<Arc<T>>,
    shard_of: Option<&(dyn Fn(&A) -> u64 + Send + Sync)>,
) -> Vec<Vec<Arc<T>>>
where
    T: BatchSlot<A>,
{
    let Some(shard_of) = shard_of else {
        return vec![batch];
    };
    let mut shards: Vec<(u64, Vec<Arc<T>>)> = Vec::new();
    for slot in batch {
        let shard = catch_unwind(AssertUnwindSafe(|| shard_of(slot.arg()))).unwrap_or(0);
        match shards.iter_mut().find(|(key, _)| *key == shard) {
            Some((_, slots)) => slots.push(slot),
            None => shards.push((shard, vec![slot])),
        }
    }
    shards.into_iter().map(|(_, slots)| slots).collect()
}

fn shared_value<R, E>(value: R, result: ExecutionResult) -> CachedOutcome<R, E> {
    CachedOutcome {
        response: Ok(Arc::new(value)),
        result,
    }
}

fn shared_error<R, E>(
    error: &Arc<HystrixError<E>>,
    result: ExecutionResult,
) -> CachedOutcome<R, E> {
    CachedOutcome {
        response: Err(Arc::clone(error)),
        result,
    }
}

fn cancelled<E>(key: &CommandKey) -> HystrixError<E> {
    HystrixError::new(FailureType::Cancelled, key.clone(), Cause::None).with_detail(
        Detail::Message(
            "was cancelled: its collapsed batch ended without answering it (the registry's \
             executor stopped, e.g. at shutdown)"
                .into(),
        ),
    )
}

/// The collapser key as a command key, to name the collapser in its errors (it passed the same
/// rules).
fn command_key<A>(core: &Core<A>) -> CommandKey {
    CommandKey::new(core.key.as_str())
        .unwrap_or_else(|_| unreachable!("a collapser key is a valid command key"))
}

fn collapser_error<A, E>(core: &Core<A>, failure: FailureType, message: String) -> HystrixError<E> {
    HystrixError::new(failure, command_key(core), Cause::None)
        .with_detail(Detail::Message(message.into()))
}

fn no_context<A, E>(core: &Core<A>, what: &str) -> HystrixError<E> {
    collapser_error(
        core,
        FailureType::NoRequestContext,
        format!(
            "(a collapser) {what}, but no request context is current: open one around the \
             request with RequestContext::new().scope(future).await (async) or \
             RequestContext::new().enter() (sync), around the call to queue() itself (it is \
             eager), or build it with CollapserScope::Global"
        ),
    )
}

fn other_type<A, E>(core: &Core<A>) -> HystrixError<E> {
    collapser_error(
        core,
        FailureType::Misuse,
        "(a collapser) found state of another type under its key in this request: two \
         collapsers share this key with different types; give them different keys"
            .to_owned(),
    )
}

/// A request that left before its response: its slot may be left out of the batch.
trait Leave: Send + Sync {
    fn leave(&self);
}

impl<A: Send + Sync, R: Send + Sync, E: Send + Sync> Leave for Slot<A, R, E> {
    fn leave(&self) {
        Slot::leave(self);
    }
}

/// The response of one collapsed request, from [`Collapser::queue`]: resolves when its batch
/// has run (or at once, for a cache hit or a refusal). Dropping it before then takes the
/// request out of its batch.
#[must_use = "dropping the future takes the request out of its batch"]
pub struct CollapsedFuture<R, E> {
    state: FutureState<R, E>,
}

enum FutureState<R, E> {
    Ready(Option<SharedResponse<R, E>>),
    Waiting {
        wait: Wait<R, E>,
        slot: Option<Arc<dyn Leave>>,
        /// Names the collapser if the response never comes.
        key: CommandKey,
    },
}

impl<R, E> fmt::Debug for CollapsedFuture<R, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollapsedFuture").finish_non_exhaustive()
    }
}

impl<R, E> CollapsedFuture<R, E> {
    fn ready(response: SharedResponse<R, E>) -> Self {
        CollapsedFuture {
            state: FutureState::Ready(Some(response)),
        }
    }

    fn waiting(wait: Wait<R, E>, slot: Option<Arc<dyn Leave>>, key: CommandKey) -> Self {
        CollapsedFuture {
            state: FutureState::Waiting { wait, slot, key },
        }
    }
}

impl<R, E> CollapsedFuture<R, E> {
    /// Whether the response is there (polling would return it at once).
    pub fn is_answered(&self) -> bool {
        match &self.state {
            FutureState::Ready(response) => response.is_some(),
            FutureState::Waiting { wait, .. } => wait.is_settled(),
        }
    }
}

impl<R, E> Future for CollapsedFuture<R, E> {
    type Output = SharedResponse<R, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match &mut self.state {
            FutureState::Ready(response) => match response.take() {
                Some(response) => Poll::Ready(response),
                None => panic!("a collapsed request's future was polled after it completed"),
            },
            FutureState::Waiting { wait, key, .. } => {
                let outcome = std::task::ready!(Pin::new(wait).poll(cx));
                let response = match outcome {
                    Some(outcome) => outcome.into_response(),
                    None => Err(Arc::new(cancelled(key))),
                };
                self.state = FutureState::Ready(None);
                Poll::Ready(response)
            }
        }
    }
}

impl<R, E> Drop for CollapsedFuture<R, E> {
    fn drop(&mut self) {
        if let FutureState::Waiting {
            slot: Some(slot), ..
        } = &self.state
        {
            slot.leave();
        }
    }
}
