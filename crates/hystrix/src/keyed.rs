//! A bounded map from names to values, for state made per key on demand (command definitions
//! per host or route, keyed breakers): at most `capacity` entries, the least recently used
//! evicted first, and entries unused for longer than an idle bound evicted as time passes
//! (SPEC Part A 35). Time is the registry's [`Clock`]; eviction happens lazily on access.

use std::num::NonZeroUsize;
use std::sync::Arc;

use lru::LruCache;
use parking_lot::Mutex;

use crate::clock::Clock;

struct Entry<V> {
    value: V,
    last_used_ms: u64,
}

/// See the module docs. Lookups take a short lock.
pub(crate) struct KeyedMap<V> {
    entries: Mutex<LruCache<Arc<str>, Entry<V>>>,
    capacity: NonZeroUsize,
    idle_ms: Option<u64>,
    clock: Arc<dyn Clock>,
}

impl<V> KeyedMap<V> {
    /// At most `capacity` entries; with `idle_ms`, an entry unused for longer is evicted.
    pub(crate) fn new(capacity: NonZeroUsize, idle_ms: Option<u64>, clock: Arc<dyn Clock>) -> Self {
        KeyedMap {
            entries: Mutex::new(LruCache::unbounded()),
            capacity,
            idle_ms,
            clock,
        }
    }

    /// Entries now (idle ones not yet evicted included).
    pub(crate) fn len(&self) -> usize {
        self.entries.lock().len()
    }

    /// The value for `key` if present, without marking it used.
    pub(crate) fn peek(&self, key: &str) -> Option<V>
    where
        V: Clone,
    {
        self.entries
            .lock()
            .peek(key)
            .map(|entry| entry.value.clone())
    }

    /// The keys, most recently used first.
    pub(crate) fn keys(&self) -> Vec<Arc<str>> {
        self.entries
            .lock()
            .iter()
            .map(|(key, _)| Arc::clone(key))
            .collect()
    }
}

impl<V: Clone> KeyedMap<V> {
    /// The value for `key`, marked as used now; made with `make` (given the key as the map
    /// keeps it, to share) if absent. To make room, the least recently used of the 16 least
    /// recently used entries that `keep` does not ask to keep is evicted (the least recently
    /// used of all if it asks to keep them all). Entries evicted to make room or for idleness
    /// are handed to `evicted`. Both run under the map's lock (so a
    /// key is made once, and its eviction's clean-up ends before the key can be made again);
    /// they must not use this map.
    pub(crate) fn get_or_try_insert<E>(
        &self,
        key: &str,
        make: impl FnOnce(&Arc<str>) -> Result<V, E>,
        keep: impl Fn(&V) -> bool,
        mut evicted: impl FnMut(&str, V),
    ) -> Result<V, E> {
        let now_ms = self.clock.now_ms();
        let mut gone = Vec::new();
        let mut entries = self.entries.lock();
        let value = {
            let value = match entries.get_mut(key) {
                Some(entry) => {
                    entry.last_used_ms = now_ms;
                    entry.value.clone()
                }
                None => {
                    let key: Arc<str> = Arc::from(key);
                    let value = make(&key)?;
                    let entry = Entry {
                        value: value.clone(),
                        last_used_ms: now_ms,
                    };
                    entries.put(key, entry);
                    while entries.len() > self.capacity.get() {
                        let victim = entries
                            .iter()
                            .rev()
                            .take(16)
                            .find(|(_, entry)| !keep(&entry.value))
                            .map(|(key, _)| Arc::clone(key));
                        match victim {
                            Some(key) => {
                                let entry = entries.pop(&key);
                                gone.extend(entry.map(|entry| (key, entry)));
                            }
                            None => gone.extend(entries.pop_lru()),
                        }
                    }
                    value
                }
            };
            if let Some(idle_ms) = self.idle_ms {
                // Least recently used first: the first entry still in use ends the scan.
                while let Some((_, entry)) = entries.peek_lru() {
                    if now_ms.saturating_sub(entry.last_used_ms) <= idle_ms {
                        break;
                    }
                    gone.extend(entries.pop_lru());
                }
            }
            value
        };
        for (key, entry) in gone {
            evicted(&key, entry.value);
        }
        drop(entries);
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::convert::Infallible;
    use std::time::Duration;

    fn map(capacity: usize, idle_ms: Option<u64>) -> (KeyedMap<u32>, ManualClock) {
        let clock = ManualClock::new();
        let map = KeyedMap::new(
            NonZeroUsize::new(capacity).unwrap(),
            idle_ms,
            Arc::new(clock.clone()),
        );
        (map, clock)
    }

    fn get(map: &KeyedMap<u32>, key: &str, value: u32) -> (u32, Vec<String>) {
        let mut evicted = Vec::new();
        let got = map
            .get_or_try_insert(
                key,
                |_| Ok::<_, Infallible>(value),
                |value| *value >= 100,
                |key, _| evicted.push(key.to_owned()),
            )
            .unwrap();
        (got, evicted)
    }

    #[test]
    fn values_are_made_once_and_the_least_recently_used_goes_first() {
        let (map, _) = map(2, None);
        assert_eq!(get(&map, "a", 1), (1, vec![]));
        assert_eq!(get(&map, "b", 2), (2, vec![]));
        assert_eq!(get(&map, "a", 9), (1, vec![]), "kept, not made again");
        assert_eq!(get(&map, "c", 3), (3, vec!["b".to_owned()]));
        assert_eq!(
            map.keys().iter().map(|k| &**k).collect::<Vec<_>>(),
            ["c", "a"]
        );
    }

    #[test]
    fn entries_asked_to_be_kept_are_evicted_last() {
        let (map, _) = map(2, None);
        get(&map, "kept", 100);
        get(&map, "b", 2);
        // "kept" is the least recently used, but asks to be kept: "b" goes.
        assert_eq!(get(&map, "c", 3), (3, vec!["b".to_owned()]));
        // All kept: the least recently used goes anyway.
        get(&map, "d", 100);
        assert_eq!(get(&map, "e", 100), (100, vec!["kept".to_owned()]));
        assert_eq!(map.peek("d"), Some(100));
        assert_eq!(map.peek("nope"), None);
    }

    #[test]
    fn entries_idle_longer_than_the_bound_are_evicted_on_access() {
        let (map, clock) = map(10, Some(1000));
        get(&map, "a", 1);
        clock.advance(Duration::from_millis(600));
        get(&map, "b", 2);
        clock.advance(Duration::from_millis(400));
        // a was used 1000 ms ago: not longer than the bound yet.
        assert_eq!(get(&map, "b", 2), (2, vec![]));
        clock.advance(Duration::from_millis(1));
        assert_eq!(get(&map, "b", 2), (2, vec!["a".to_owned()]));
        assert_eq!(map.len(), 1);
    }

    #[test]
    fn a_failed_make_inserts_nothing() {
        let (map, _) = map(2, None);
        let err = map.get_or_try_insert("a", |_| Err("bad"), |_| false, |_, _| {});
        assert_eq!(err, Err("bad"));
        assert_eq!(map.len(), 0);
    }
}
