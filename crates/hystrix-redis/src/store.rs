//! [`RedisStateStore`]: the [`StateStore`] calls as Lua scripts over one auto-reconnecting
//! multiplexed connection.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hystrix::CommandKey;
use hystrix::circuit::store::{
    ChangeListener, HealthDelta, SharedView, StateStore, StateStoreError, StoreFuture,
};
use parking_lot::Mutex;
use redis::aio::ConnectionManager;
use redis::{ErrorKind, FromRedisValue, RedisError, RedisResult, Script, ServerErrorKind};
use tokio::runtime::Handle;
use tokio::task::JoinHandle;

use crate::backoff::Backoff;
use crate::builder::RedisStateStoreBuilder;
use crate::keys::CommandKeys;
use crate::pubsub::Hub;
use crate::scripts::{self, Call, FetchReply, Layout, OtherFingerprint, Report, Scripts};

/// A [`StateStore`] in Redis: circuit-breaker state shared by every instance of a service.
///
/// Made with [`RedisStateStore::builder`]; give it to
/// [`RegistryBuilder::state_store`](hystrix::RegistryBuilder::state_store). Cheap to clone:
/// clones share one connection, one subscriber and one set of counters.
///
/// - **Calls**: each [`StateStore`] call is one Lua script (`EVALSHA`, loaded again on
///   `NOSCRIPT`), atomic on the server; a publish is one pipeline of one script per command.
///   Trips and closes compare-and-set the command's generation. The open period is the TTL of
///   the open key and the probe permit is `SET NX PX`: Redis's clock alone measures them
///   (`TIME` inside the scripts where a time is needed), so host clocks are never compared.
/// - **Keys**: see the [crate docs](crate#keys); every key has a TTL.
/// - **Time-boxed**: every call runs on the store's runtime and gives up after the connect +
///   response timeouts ([`StateStoreError::Timeout`]); a lost connection is re-established in
///   the background by the `redis` crate's `ConnectionManager` with exponential backoff, and
///   after a connection failure or timeout the store itself refuses calls at once
///   ([`StateStoreError::Unavailable`]) for a backoff delay that doubles from the builder's
///   `reconnect_backoff` minimum up to its maximum, and resets on the next success.
/// - **Pushes**: trips and closes are published on the service's channel; the store's
///   subscriber (a connection of its own, resubscribing after every reconnect) tells the
///   registries that [watch](StateStore::watch) it to sync at once.
/// - **Fingerprints**: the registry's [breaker fingerprint](StateStore::set_fingerprint) of a
///   command is published beside its counts; a fetch that finds reporters with another
///   fingerprint logs a warning (once per command) and shows in
///   [`fingerprint_mismatches`](RedisStateStore::fingerprint_mismatches).
///
/// Errors are never raised to callers of commands: the registry counts them
/// ([`StateStoreStatus`](hystrix::circuit::StateStoreStatus)) and its breakers decide on local
/// state while the store is out of reach.
#[derive(Clone)]
pub struct RedisStateStore {
    inner: Arc<Inner>,
}

/// Another fingerprint seen among a command's reporters (see
/// [`RedisStateStore::fingerprint_mismatches`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FingerprintMismatch {
    /// The command.
    pub command: CommandKey,
    /// This instance's fingerprint of it.
    pub fingerprint: Arc<str>,
    /// Reporters within the rolling window whose fingerprint differs from this one.
    pub instances: u32,
    /// One of them.
    pub other_instance: String,
    /// Its fingerprint.
    pub other_fingerprint: String,
}

pub(crate) struct Inner {
    pub(crate) manager: ConnectionManager,
    pub(crate) runtime: Handle,
    pub(crate) service: String,
    pub(crate) layout: Layout,
    pub(crate) scripts: Scripts,
    /// The most a call may take: connect + response timeouts.
    pub(crate) call_timeout: Duration,
    pub(crate) backoff: Mutex<Backoff>,
    pub(crate) hub: Arc<Hub>,
    pub(crate) subscriber: Option<JoinHandle<()>>,
    pub(crate) fingerprints: Mutex<HashMap<CommandKey, Arc<str>>>,
    pub(crate) mismatches: Mutex<HashMap<CommandKey, FingerprintMismatch>>,
    pub(crate) warned: Mutex<HashSet<CommandKey>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(subscriber) = self.subscriber.take() {
            subscriber.abort();
        }
    }
}

impl RedisStateStore {
    /// A builder for a store at `url` (`redis://host:port/db`, see the `redis` crate's
    /// `Client::open`) shared by the instances of `service` (the namespace of every key and of
    /// the Pub/Sub channel).
    pub fn builder(url: impl Into<String>, service: impl Into<String>) -> RedisStateStoreBuilder {
        RedisStateStoreBuilder::new(url.into(), service.into())
    }

    pub(crate) fn from_inner(inner: Inner) -> Self {
        RedisStateStore {
            inner: Arc::new(inner),
        }
    }

    /// The service namespace.
    pub fn service(&self) -> &str {
        &self.inner.service
    }

    /// A `PING`, time-boxed like every call (connect + response timeouts).
    ///
    /// # Errors
    /// A [`StateStoreError`] if Redis did not answer in time, cannot be reached, or the store
    /// is backing off after a failure.
    pub async fn ping(&self) -> Result<(), StateStoreError> {
        let inner = Arc::clone(&self.inner);
        self.run(async move {
            let mut con = inner.manager.clone();
            redis::cmd("PING").query_async::<String>(&mut con).await?;
            Ok(())
        })
        .await
    }

    /// Whether the Pub/Sub subscriber is subscribed now (`false` without Pub/Sub).
    pub fn pubsub_connected(&self) -> bool {
        self.inner.hub.connected.load(Ordering::Acquire)
    }

    /// How many times the subscriber has subscribed: 1 after the first connection, plus 1 per
    /// resubscription after a reconnect.
    pub fn pubsub_subscriptions(&self) -> u64 {
        self.inner.hub.subscriptions.load(Ordering::Acquire)
    }

    /// Trips and closes heard on the channel (this instance's own included).
    pub fn transitions_heard(&self) -> u64 {
        self.inner.hub.heard.load(Ordering::Acquire)
    }

    /// The commands whose latest fetch found reporters with another breaker fingerprint than
    /// this instance's, sorted by command. Empty while all agree (or no fingerprint was set).
    pub fn fingerprint_mismatches(&self) -> Vec<FingerprintMismatch> {
        let mut all: Vec<_> = self.inner.mismatches.lock().values().cloned().collect();
        all.sort_by(|a, b| a.command.cmp(&b.command));
        all
    }

    /// Runs `work` on the store's runtime, time-boxed, through the backoff gate.
    fn run<T: Send + 'static>(
        &self,
        work: impl Future<Output = RedisResult<T>> + Send + 'static,
    ) -> StoreFuture<'static, T> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move {
            if let Some(wait) = inner.backoff.lock().wait_at(Instant::now()) {
                return Err(StateStoreError::Unavailable(format!(
                    "backing off after a connection failure ({} ms left)",
                    wait.as_millis()
                )));
            }
            let timeout = inner.call_timeout;
            let mut call = Pending {
                task: inner
                    .runtime
                    .spawn(async move { tokio::time::timeout(timeout, work).await }),
                inner: Arc::clone(&inner),
                done: false,
            };
            let result = match (&mut call).await {
                Ok(Ok(Ok(value))) => Ok(value),
                Ok(Ok(Err(err))) => Err(store_error(err, timeout)),
                Ok(Err(_elapsed)) => Err(StateStoreError::Timeout(millis(timeout))),
                Err(join) => Err(StateStoreError::Other(Box::new(join))),
            };
            call.done = true;
            let mut backoff = inner.backoff.lock();
            match &result {
                Ok(_) => backoff.succeeded(),
                Err(StateStoreError::Unavailable(_) | StateStoreError::Timeout(_)) => {
                    backoff.failed(Instant::now());
                }
                Err(_) => {}
            }
            result
        })
    }

    /// One script call through [`run`](Self::run) (`EVALSHA`, the script loaded again on
    /// `NOSCRIPT`); `then` turns the reply into the call's value.
    fn invoke<R, T>(
        &self,
        script: fn(&Scripts) -> &Script,
        call: Call,
        then: impl FnOnce(&Inner, R) -> T + Send + 'static,
    ) -> StoreFuture<'static, T>
    where
        R: FromRedisValue + Send + 'static,
        T: Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        self.run(async move {
            let mut con = inner.manager.clone();
            let reply: R = call
                .invocation(script(&inner.scripts))
                .invoke_async(&mut con)
                .await?;
            Ok(then(&inner, reply))
        })
    }

    fn keys(&self, command: &CommandKey) -> CommandKeys {
        CommandKeys::new(&self.inner.service, command.as_str())
    }
}

/// A call's task: aborted if the caller drops it (its own time box ran out), which counts as a
/// timeout for the backoff.
struct Pending<T> {
    task: JoinHandle<T>,
    inner: Arc<Inner>,
    done: bool,
}

impl<T> Future for Pending<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.task).poll(cx)
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        if !self.done {
            self.task.abort();
            self.inner.backoff.lock().failed(Instant::now());
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Timeouts and lost connections are the store being out of reach; anything else is Other.
fn store_error(err: RedisError, timeout: Duration) -> StateStoreError {
    if err.is_timeout() {
        StateStoreError::Timeout(millis(timeout))
    } else if err.is_io_error() || err.is_connection_dropped() || err.is_connection_refusal() {
        StateStoreError::Unavailable(err.to_string())
    } else {
        StateStoreError::Other(Box::new(err))
    }
}

fn is_noscript(err: &RedisError) -> bool {
    err.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
}

impl Inner {
    /// Records what a fetch found about other fingerprints of `command`.
    fn note_fingerprints(
        &self,
        command: &CommandKey,
        own: Option<Arc<str>>,
        other: Option<OtherFingerprint>,
    ) {
        let (Some(own), Some(other)) = (own, other) else {
            self.mismatches.lock().remove(command);
            return;
        };
        if self.warned.lock().insert(command.clone()) {
            tracing::warn!(
                command = %command,
                fingerprint = %own,
                other_instance = %other.instance,
                other_fingerprint = %other.fingerprint,
                instances = other.instances,
                "hystrix-redis: instances share this command's breaker state with other thresholds"
            );
        }
        self.mismatches.lock().insert(
            command.clone(),
            FingerprintMismatch {
                command: command.clone(),
                fingerprint: own,
                instances: other.instances,
                other_instance: other.instance,
                other_fingerprint: other.fingerprint,
            },
        );
    }

    /// Runs the publish pipeline; commands refused with NOSCRIPT (a restarted or flushed
    /// script cache) are sent again once the script is loaded, so none is counted twice.
    async fn publish(&self, calls: Vec<Call>) -> RedisResult<()> {
        let mut con = self.manager.clone();
        let mut pending = calls;
        for attempt in 0..2 {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for call in &pending {
                pipe.add_command(call.evalsha(&self.scripts.publish));
            }
            let results: Vec<RedisResult<redis::Value>> = pipe.query_async(&mut con).await?;
            let mut missing = Vec::new();
            for (call, result) in pending.into_iter().zip(results) {
                match result {
                    Ok(_) => {}
                    Err(err) if attempt == 0 && is_noscript(&err) => missing.push(call),
                    Err(err) => return Err(err),
                }
            }
            if missing.is_empty() {
                return Ok(());
            }
            self.scripts.publish.load_async(&mut con).await?;
            pending = missing;
        }
        Ok(())
    }
}

impl fmt::Debug for RedisStateStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStateStore")
            .field("service", &self.inner.service)
            .field("layout", &self.inner.layout)
            .field("call_timeout", &self.inner.call_timeout)
            .field("pubsub_connected", &self.pubsub_connected())
            .finish_non_exhaustive()
    }
}

impl StateStore for RedisStateStore {
    fn publish<'a>(&'a self, deltas: &'a [HealthDelta]) -> StoreFuture<'a, ()> {
        // One script call per command (its keys share one hash slot), in one pipeline.
        let mut by_command: Vec<(&CommandKey, Vec<Report<'_>>)> = Vec::new();
        let fingerprints = self.inner.fingerprints.lock().clone();
        for delta in deltas {
            let report = Report {
                instance: &delta.instance,
                requests: delta.requests,
                errors: delta.errors,
                fingerprint: fingerprints.get(&delta.command_key).map(|f| &**f),
            };
            match by_command
                .iter_mut()
                .find(|(k, _)| **k == delta.command_key)
            {
                Some((_, reports)) => reports.push(report),
                None => by_command.push((&delta.command_key, vec![report])),
            }
        }
        let calls: Vec<Call> = by_command
            .iter()
            .map(|(command, reports)| {
                scripts::publish(&self.keys(command), &self.inner.layout, reports)
            })
            .collect();
        if calls.is_empty() {
            return Box::pin(async { Ok(()) });
        }
        let inner = Arc::clone(&self.inner);
        self.run(async move { inner.publish(calls).await })
    }

    fn fetch<'a>(&'a self, command_key: &'a CommandKey) -> StoreFuture<'a, SharedView> {
        let own = self.inner.fingerprints.lock().get(command_key).cloned();
        let call = scripts::fetch(&self.keys(command_key), &self.inner.layout, own.as_deref());
        let command = command_key.clone();
        self.invoke(
            |s| &s.fetch,
            call,
            move |inner, reply: FetchReply| {
                let (view, other) = scripts::view(reply);
                inner.note_fingerprints(&command, own, other);
                view
            },
        )
    }

    fn try_trip<'a>(
        &'a self,
        command_key: &'a CommandKey,
        generation: u64,
        open_for_ms: u64,
    ) -> StoreFuture<'a, Option<u64>> {
        let call = scripts::trip(
            &self.keys(command_key),
            &self.inner.layout,
            command_key.as_str(),
            generation,
            open_for_ms,
        );
        self.invoke(|s| &s.trip, call, |_, next: u64| (next > 0).then_some(next))
    }

    fn try_acquire_probe<'a>(
        &'a self,
        command_key: &'a CommandKey,
        instance: &'a str,
        ttl_ms: u64,
    ) -> StoreFuture<'a, bool> {
        let call = scripts::probe(
            &self.keys(command_key),
            &self.inner.layout,
            instance,
            ttl_ms,
        );
        self.invoke(|s| &s.probe, call, |_, granted: u8| granted == 1)
    }

    fn close<'a>(
        &'a self,
        command_key: &'a CommandKey,
        generation: u64,
    ) -> StoreFuture<'a, Option<u64>> {
        let call = scripts::close(
            &self.keys(command_key),
            &self.inner.layout,
            command_key.as_str(),
            generation,
        );
        self.invoke(
            |s| &s.close,
            call,
            |_, next: u64| (next > 0).then_some(next),
        )
    }

    fn watch(&self, listener: ChangeListener) {
        self.inner.hub.add(listener);
    }

    fn set_fingerprint(&self, command_key: &CommandKey, fingerprint: &str) {
        self.inner
            .fingerprints
            .lock()
            .insert(command_key.clone(), Arc::from(fingerprint));
    }
}
