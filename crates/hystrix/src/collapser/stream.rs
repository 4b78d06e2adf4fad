//! The stream collapser (Hystrix's `HystrixObservableCollapser`): the batch is a stream command
//! whose values are routed to the requests by key.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::poll_fn;
use std::hash::Hash;
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures_core::Stream;
use parking_lot::Mutex;

use super::batcher::{Abort, AnswerOnDrop, BatchRunner, BatchSlot, Limits, Waiting};
use super::{CollapserBuilder, CollapserMetrics, Core, Parts};
use crate::command::{Classify, Command, panic_message};
use crate::config::CollapserProperties;
use crate::context::{Carried, RequestContext, WeakContext};
use crate::error::{Cause, ConfigError, Detail, FailureType, HystrixError};
use crate::key::{CollapserKey, CommandKey};

/// One item of a collapsed request's stream: a shared value, or the shared error that ends it.
pub type CollapsedItem<V, E> = Result<Arc<V>, Arc<HystrixError<E>>>;

/// A request's place in a stream batch: its argument and the queue of its items.
pub(crate) struct StreamSlot<A, V, E> {
    arg: A,
    feed: Mutex<Feed<V, E>>,
    waiting: Waiting,
}

struct Feed<V, E> {
    items: VecDeque<CollapsedItem<V, E>>,
    ended: bool,
    got_any: bool,
    waker: Option<Waker>,
}

impl<A, V, E> StreamSlot<A, V, E> {
    fn push(&self, item: CollapsedItem<V, E>) {
        let mut feed = self.feed.lock();
        if feed.ended {
            return;
        }
        feed.got_any = true;
        feed.items.push_back(item);
        if let Some(waker) = feed.waker.take() {
            drop(feed);
            waker.wake();
        }
    }

    fn end(&self) {
        let mut feed = self.feed.lock();
        feed.ended = true;
        if let Some(waker) = feed.waker.take() {
            drop(feed);
            waker.wake();
        }
    }

    fn got_any(&self) -> bool {
        self.feed.lock().got_any
    }
}

impl<A, V, E> Abort for StreamSlot<A, V, E> {
    fn abort(&self, key: &CommandKey) {
        self.push(Err(Arc::new(super::cancelled(key))));
        self.end();
    }
}

impl<A, V, E> BatchSlot<A> for StreamSlot<A, V, E>
where
    A: Send + Sync + 'static,
    V: Send + Sync + 'static,
    E: Send + Sync + 'static,
{
    type Init = ();

    fn create(arg: A, (): ()) -> Self {
        StreamSlot {
            arg,
            feed: Mutex::new(Feed {
                items: VecDeque::new(),
                ended: false,
                got_any: false,
                waker: None,
            }),
            waiting: Waiting::one(),
        }
    }

    fn arg(&self) -> &A {
        &self.arg
    }

    fn join(&self) {
        self.waiting.join();
    }

    fn is_wanted(&self) -> bool {
        self.waiting.any()
    }
}

/// What a collapsed stream reads from (its slot, whatever the argument type).
trait Source<V, E>: Send + Sync {
    fn poll_item(&self, cx: &mut Context<'_>) -> Poll<Option<CollapsedItem<V, E>>>;
    fn leave(&self);
}

impl<A: Send + Sync, V: Send + Sync, E: Send + Sync> Source<V, E> for StreamSlot<A, V, E> {
    fn poll_item(&self, cx: &mut Context<'_>) -> Poll<Option<CollapsedItem<V, E>>> {
        let mut feed = self.feed.lock();
        if let Some(item) = feed.items.pop_front() {
            return Poll::Ready(Some(item));
        }
        if feed.ended {
            return Poll::Ready(None);
        }
        feed.waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn leave(&self) {
        self.waiting.leave();
    }
}

/// The stream of one request to a [`StreamCollapser`]: every value of its batch whose key is
/// its argument's, in the batch's order, then the end; an error of the batch ends it with that
/// error (after the values before it). Dropping it before its batch runs takes the request out.
#[must_use = "dropping the stream takes the request out of its batch"]
pub struct CollapsedStream<V, E> {
    state: StreamState<V, E>,
}

enum StreamState<V, E> {
    Refused(Option<Arc<HystrixError<E>>>),
    Reading {
        source: Arc<dyn Source<V, E>>,
        ended: bool,
    },
}

impl<V, E> fmt::Debug for CollapsedStream<V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollapsedStream").finish_non_exhaustive()
    }
}

impl<V, E> Stream for CollapsedStream<V, E> {
    type Item = CollapsedItem<V, E>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        match &mut self.state {
            StreamState::Refused(error) => Poll::Ready(error.take().map(Err)),
            StreamState::Reading { source, ended } => {
                if *ended {
                    return Poll::Ready(None);
                }
                let item = std::task::ready!(source.poll_item(cx));
                if item.is_none() {
                    *ended = true;
                }
                Poll::Ready(item)
            }
        }
    }
}

impl<V, E> Drop for CollapsedStream<V, E> {
    fn drop(&mut self) {
        if let StreamState::Reading {
            source,
            ended: false,
        } = &self.state
        {
            source.leave();
        }
    }
}

/// A collapser whose batch is a stream (Hystrix's `HystrixObservableCollapser`), from
/// [`CollapserBuilder::build_stream`]: each value of the batch goes to every request whose
/// argument has the value's key (a request may get several, in order); values with no request
/// are dropped (logged at debug level); a request that gets none sees an empty stream, or
/// [`FailureType::CollapserMissingResponse`] with
/// [`CollapserBuilder::missing_response_is_error`]. Windows, scopes, sharding and metrics as
/// [`Collapser`](super::Collapser); duplicate arguments are sent once in the batch while
/// `requestCache.enabled`, each request keeps its own stream; there is no collapser-level
/// request cache (a cache-key function is ignored here).
pub struct StreamCollapser<A, V, E> {
    parts: Parts<A, StreamSlot<A, V, E>>,
}

impl<A, V, E> Clone for StreamCollapser<A, V, E> {
    fn clone(&self) -> Self {
        StreamCollapser {
            parts: self.parts.clone(),
        }
    }
}

impl<A, V, E> fmt::Debug for StreamCollapser<A, V, E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamCollapser")
            .field("key", &self.parts.core.key)
            .field("scope", &self.parts.core.scope)
            .finish_non_exhaustive()
    }
}

impl<A, V, E> CollapserBuilder<A, V, E>
where
    A: Clone + Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
    E: Send + Sync + 'static,
{
    /// Builds a [`StreamCollapser`] whose batches run as stream executions of `command`
    /// (`run_stream`): `batch` makes the stream of values for a batch's
    /// arguments; `key_of_value` and `key_of_arg` give the key that routes a value to the
    /// requests of equal key. The per-request fallback, if any, is the last item of each
    /// request's stream when the batch fails (instead of the error).
    ///
    /// # Errors
    /// As [`build`](Self::build).
    pub fn build_stream<C, F, S, K, KV, KA>(
        self,
        command: Command<C>,
        batch: F,
        key_of_value: KV,
        key_of_arg: KA,
    ) -> Result<StreamCollapser<A, V, E>, ConfigError>
    where
        C: Classify<E> + Clone + Send + Sync + 'static,
        F: Fn(Vec<A>) -> S + Send + Sync + 'static,
        S: Stream<Item = Result<V, E>> + Send + 'static,
        K: Hash + Eq + Send + 'static,
        KV: Fn(&V) -> K + Send + Sync + 'static,
        KA: Fn(&A) -> K + Send + Sync + 'static,
    {
        let missing_is_error = self.missing_is_error;
        let fallback = self.fallback.clone();
        let core = self.core(&command)?;
        let runner: Arc<dyn BatchRunner<StreamSlot<A, V, E>>> = Arc::new(StreamRunner {
            core: Arc::clone(&core),
            command,
            batch,
            key_of_value,
            key_of_arg,
            fallback,
            missing_is_error,
            _types: PhantomData,
        });
        Ok(StreamCollapser {
            parts: Parts::shared(core, runner, std::any::type_name::<(A, V, E)>())?,
        })
    }
}

impl<A, V, E> StreamCollapser<A, V, E>
where
    A: Clone + Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
    E: Send + Sync + 'static,
{
    /// Adds a request for `arg` to the current batch now and returns its stream (see the type's
    /// docs). A REQUEST-scoped collapser with no context current yields one
    /// [`FailureType::NoRequestContext`] error.
    pub fn queue(&self, arg: A) -> CollapsedStream<V, E> {
        let batcher = match self.parts.batcher(RequestContext::current().as_ref()) {
            Ok(batcher) => batcher,
            Err(error) => return refused(error),
        };
        let slot = batcher.submit(arg, (), false);
        CollapsedStream {
            state: StreamState::Reading {
                source: slot,
                ended: false,
            },
        }
    }

    /// The collapser key.
    pub fn key(&self) -> &CollapserKey {
        &self.parts.core.key
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

fn refused<V, E>(error: HystrixError<E>) -> CollapsedStream<V, E> {
    CollapsedStream {
        state: StreamState::Refused(Some(Arc::new(error))),
    }
}

/// Runs the batches of one stream collapser.
struct StreamRunner<A, V, E, C, F, S, K, KV, KA> {
    core: Arc<Core<A>>,
    command: Command<C>,
    batch: F,
    key_of_value: KV,
    key_of_arg: KA,
    fallback: Option<super::FallbackFn<A, V, E>>,
    missing_is_error: bool,
    _types: PhantomData<fn() -> (S, K)>,
}

impl<A, V, E, C, F, S, K, KV, KA> BatchRunner<StreamSlot<A, V, E>>
    for StreamRunner<A, V, E, C, F, S, K, KV, KA>
where
    A: Clone + Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
    E: Send + Sync + 'static,
    C: Classify<E> + Clone + Send + Sync + 'static,
    F: Fn(Vec<A>) -> S + Send + Sync + 'static,
    S: Stream<Item = Result<V, E>> + Send + 'static,
    K: Hash + Eq + Send + 'static,
    KV: Fn(&V) -> K + Send + Sync + 'static,
    KA: Fn(&A) -> K + Send + Sync + 'static,
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

    fn run(self: Arc<Self>, batch: Vec<Arc<StreamSlot<A, V, E>>>, context: Option<&WeakContext>) {
        let Some(shards) = self.core.start_batch(batch) else {
            return;
        };
        let Some(executor) = self.core.env.executor() else {
            let error = Arc::new(super::cancelled(self.command.key()));
            for slot in shards.iter().flatten() {
                slot.push(Err(Arc::clone(&error)));
                slot.end();
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

impl<A, V, E, C, F, S, K, KV, KA> StreamRunner<A, V, E, C, F, S, K, KV, KA>
where
    A: Clone + Hash + Eq + Send + Sync + 'static,
    V: Send + Sync + 'static,
    E: Send + Sync + 'static,
    C: Classify<E> + Clone + Send + Sync + 'static,
    F: Fn(Vec<A>) -> S + Send + Sync + 'static,
    S: Stream<Item = Result<V, E>> + Send + 'static,
    K: Hash + Eq + Send + 'static,
    KV: Fn(&V) -> K + Send + Sync + 'static,
    KA: Fn(&A) -> K + Send + Sync + 'static,
{
    async fn run_shard(&self, shard: Vec<Arc<StreamSlot<A, V, E>>>) {
        let guard = AnswerOnDrop {
            slots: shard,
            key: self.command.key().clone(),
        };
        let shard = &guard.slots;
        // Each distinct argument once (while requestCache.enabled), each request its stream.
        let mut args: Vec<A> = Vec::with_capacity(shard.len());
        let mut routes: HashMap<K, Vec<usize>> = HashMap::new();
        for (at, slot) in shard.iter().enumerate() {
            if !self.core.limits().share_duplicates || !args.contains(&slot.arg) {
                args.push(slot.arg.clone());
            }
            match catch_unwind(AssertUnwindSafe(|| (self.key_of_arg)(&slot.arg))) {
                Ok(key) => routes.entry(key).or_default().push(at),
                Err(panic) => {
                    let what = format!("key function panicked: {}", panic_message(panic));
                    slot.push(Err(Arc::new(self.error_of(&what))));
                    slot.end();
                }
            }
        }
        // COLLAPSED counts the requests (as the batch size in the collapser's metrics).
        let collapsed = u32::try_from(shard.len()).unwrap_or(u32::MAX);
        let Ok(run) = catch_unwind(AssertUnwindSafe(|| (self.batch)(args))) else {
            let error = Arc::new(self.error_of("batch function panicked"));
            for slot in shard {
                slot.push(Err(Arc::clone(&error)));
                slot.end();
            }
            return;
        };
        let mut values = pin!(
            self.command
                .run_stream(run)
                .collapsed(collapsed)
                .to_observable()
        );
        while let Some(item) = poll_fn(|cx| values.as_mut().poll_next(cx)).await {
            match item {
                Ok(value) => {
                    let key = catch_unwind(AssertUnwindSafe(|| (self.key_of_value)(&value)));
                    match key.ok().and_then(|key| routes.get(&key)) {
                        Some(requests) => {
                            let value = Arc::new(value);
                            for &at in requests {
                                shard[at].push(Ok(Arc::clone(&value)));
                            }
                        }
                        None => tracing::debug!(
                            collapser = %self.core.key,
                            "hystrix: a batch value matches no request of its batch; dropped"
                        ),
                    }
                }
                Err(error) => {
                    let error = Arc::new(error);
                    for slot in shard {
                        let fallback = self.fallback.as_ref().and_then(|fallback| {
                            catch_unwind(AssertUnwindSafe(|| fallback(&slot.arg, &error))).ok()
                        });
                        slot.push(match fallback {
                            Some(value) => Ok(Arc::new(value)),
                            None => Err(Arc::clone(&error)),
                        });
                    }
                }
            }
        }
        for slot in shard {
            if self.missing_is_error && !slot.got_any() {
                slot.push(Err(Arc::new(self.missing_response())));
            }
            slot.end();
        }
    }

    fn missing_response(&self) -> HystrixError<E> {
        self.batch_error(
            FailureType::CollapserMissingResponse,
            format!(
                "gave no value for a request of collapser {}: no value of its batch had that \
                 request's key",
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

    fn batch_error(&self, failure: FailureType, message: String) -> HystrixError<E> {
        HystrixError::new(failure, self.command.key().clone(), Cause::None)
            .with_detail(Detail::Message(message.into()))
    }
}
