//! Command definitions made per key on demand (per host, route, tenant...), in a bounded map.

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use crate::command::{AllFailures, Command, CommandBuilder};
use crate::config::ceil_millis;
use crate::error::ConfigError;
use crate::key::CommandKey;
use crate::keyed::KeyedMap;
use crate::registry::Registry;

type Factory<C> = dyn Fn(&str) -> CommandBuilder<C> + Send + Sync;

/// Command definitions keyed by name, made on first use by a factory and kept in a bounded
/// map: at most [`max_keys`](KeyedCommandsBuilder::max_keys) keys, the least recently used
/// evicted first, and keys unused for longer than
/// [`idle_timeout`](KeyedCommandsBuilder::idle_timeout) evicted. An evicted key's state
/// (breaker, metrics, semaphores, and its thread pool if no other key uses it) is removed from
/// the registry with [`Registry::remove`]: executions in flight finish on it, and the key's
/// next use starts afresh. Two names the factory maps to one command key share its state,
/// which is removed when the last of them is evicted. The command keys a `KeyedCommands` makes
/// are its own; do not define them elsewhere in the same registry.
///
/// Cheap to clone (clones share the map). Used by the tower layer for a key per request
/// (`HystrixLayer::keyed`, feature `tower`).
///
/// ```
/// use hystrix::command::KeyedCommands;
/// use hystrix::{Command, IsolationStrategy, Registry};
/// use std::num::NonZeroUsize;
/// use std::time::Duration;
///
/// let registry = Registry::new();
/// // One command (and so one breaker) per host.
/// let per_host = KeyedCommands::builder(|host| {
///     Command::builder(format!("Fetch-{host}"))
///         .group("Fetch")
///         .isolation(IsolationStrategy::Semaphore)
///         .timeout(Duration::from_millis(300))
/// })
/// .registry(&registry)
/// .max_keys(NonZeroUsize::new(500).unwrap())
/// .build();
///
/// let cmd = per_host.get("api.example.com")?;
/// assert_eq!(cmd.key().as_str(), "Fetch-api.example.com");
/// assert_eq!(cmd.run(|| Ok::<_, std::io::Error>(1)).execute()?, 1);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct KeyedCommands<C = AllFailures> {
    inner: Arc<Inner<C>>,
}

struct Inner<C> {
    factory: Box<Factory<C>>,
    registry: Registry,
    map: KeyedMap<Command<C>>,
    /// Names held per command key (a factory may map several names to one key); changed only
    /// under the map's lock.
    names_per_key: Mutex<HashMap<CommandKey, usize>>,
}

impl<C> Clone for KeyedCommands<C> {
    fn clone(&self) -> Self {
        KeyedCommands {
            inner: Arc::clone(&self.inner),
        }
    }
}

impl<C> fmt::Debug for KeyedCommands<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCommands")
            .field("keys", &self.inner.map.len())
            .finish_non_exhaustive()
    }
}

/// Builds [`KeyedCommands`].
#[must_use = "a builder does nothing until built"]
pub struct KeyedCommandsBuilder<C> {
    factory: Box<Factory<C>>,
    registry: Option<Registry>,
    max_keys: NonZeroUsize,
    idle_timeout: Option<Duration>,
}

impl<C> fmt::Debug for KeyedCommandsBuilder<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyedCommandsBuilder")
            .field("max_keys", &self.max_keys)
            .field("idle_timeout", &self.idle_timeout)
            .finish_non_exhaustive()
    }
}

/// The default bound on keys.
const DEFAULT_MAX_KEYS: NonZeroUsize = match NonZeroUsize::new(1000) {
    Some(n) => n,
    None => unreachable!(),
};

impl KeyedCommands {
    /// Starts a map whose definitions `factory` makes from a key (the name given to
    /// [`get`](KeyedCommands::get)). Defaults: the global registry, 1000 keys, keys idle for
    /// more than one hour evicted.
    pub fn builder<C, F>(factory: F) -> KeyedCommandsBuilder<C>
    where
        F: Fn(&str) -> CommandBuilder<C> + Send + Sync + 'static,
    {
        KeyedCommandsBuilder {
            factory: Box::new(factory),
            registry: None,
            max_keys: DEFAULT_MAX_KEYS,
            idle_timeout: Some(Duration::from_secs(3600)),
        }
    }
}

impl<C> KeyedCommandsBuilder<C> {
    /// The registry the definitions live in (default: the global one).
    pub fn registry(mut self, registry: &Registry) -> Self {
        self.registry = Some(registry.clone());
        self
    }

    /// At most this many keys (default 1000); past it the least recently used key is evicted.
    pub fn max_keys(mut self, max_keys: NonZeroUsize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// Keys unused for longer than this are evicted (default one hour, rounded up to whole ms);
    /// `None` keeps them until the key bound evicts them.
    pub fn idle_timeout(mut self, idle: Option<Duration>) -> Self {
        self.idle_timeout = idle;
        self
    }

    /// The map, empty.
    pub fn build(self) -> KeyedCommands<C> {
        let registry = self.registry.unwrap_or_else(|| Registry::global().clone());
        let clock = Arc::clone(registry.clock());
        KeyedCommands {
            inner: Arc::new(Inner {
                factory: self.factory,
                map: KeyedMap::new(self.max_keys, self.idle_timeout.map(ceil_millis), clock),
                registry,
                names_per_key: Mutex::new(HashMap::new()),
            }),
        }
    }
}

impl<C: Clone> KeyedCommands<C> {
    /// The definition for `key`, built by the factory on first use (marks it used now).
    ///
    /// # Errors
    /// The [`ConfigError`] of building the factory's definition (an invalid key or property,
    /// a conflict with another definition of its command key); nothing is kept then.
    pub fn get(&self, key: &str) -> Result<Command<C>, ConfigError> {
        let inner = &*self.inner;
        let kept = inner.map.get_or_try_insert(
            key,
            |_| {
                let command = (inner.factory)(key).build_in(&inner.registry)?;
                *inner
                    .names_per_key
                    .lock()
                    .entry(command.key().clone())
                    .or_insert(0) += 1;
                Ok(command)
            },
            |_| None,
            |_, evicted| {
                let mut names = inner.names_per_key.lock();
                let last = match names.get_mut(evicted.key()) {
                    Some(count) if *count > 1 => {
                        *count -= 1;
                        false
                    }
                    _ => true,
                };
                if last {
                    names.remove(evicted.key());
                    inner.registry.remove(evicted.key().as_str());
                }
            },
        )?;
        // No definition is ever held, so the map can always make room for one more.
        Ok(kept.unwrap_or_else(|| unreachable!("a map of definitions always has room")))
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.inner.map.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The keys held now (the names given to [`get`](KeyedCommands::get)), most recently used
    /// first.
    pub fn keys(&self) -> Vec<String> {
        self.inner
            .map
            .keys()
            .iter()
            .map(|key| key.to_string())
            .collect()
    }
}
