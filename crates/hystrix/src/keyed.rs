//! A bounded map from names to values, for state made per key on demand (command definitions
//! per host or route, keyed breakers): at most `capacity` entries, the least recently used
//! evicted first, and entries unused for longer than an idle bound evicted as time passes.
//! Time is the registry's [`Clock`]; eviction happens lazily on access.
//!
//! An owner may ask the map to hold an entry until a time (a keyed breaker that is OPEN or
//! HALF_OPEN, until its open period and its trial end). A held entry is never evicted before
//! that time, neither to make room nor for idleness. To make room, the least recently used
//! entry that is not held goes first; then an entry whose time has passed (the least recently
//! used of them); when every entry is held, there is no room: the caller decides what to do
//! (keyed breakers send the new key through an overflow breaker). Memory stays bounded either
//! way.
//!
//! Held entries live apart from the others, so finding a victim never walks past them: an
//! entry found held (when it reaches the least recently used end) moves to the held set, and
//! the held set is looked through only when it may hold a victim: once the earliest of its
//! times has passed, or after its owner said that an entry may have stopped being held early
//! ([`KeyedMap::note_release`]). Lookups stay O(1); making room is O(1) amortized, and O(held)
//! at most once per such event.

use std::collections::HashMap;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lru::LruCache;
use parking_lot::Mutex;

use crate::clock::Clock;

#[derive(Clone)]
struct Entry<V> {
    value: V,
    last_used_ms: u64,
}

/// An evicted entry, handed to the caller's clean-up once the map is consistent.
type Gone<V> = Vec<(Arc<str>, Entry<V>)>;

struct Entries<V> {
    /// The entries not held when last looked at, least recently used last (all of them when
    /// the owner never holds one).
    free: LruCache<Arc<str>, Entry<V>>,
    /// The entries held when last looked at, in no order.
    held: HashMap<Arc<str>, Entry<V>>,
    /// When to look through them again.
    due: Due,
}

/// When the held entries are due a look (times in ms; an owner's early release aside).
#[derive(Clone, Copy)]
struct Due {
    /// Before this time no held entry's time passes: none may make room.
    room_ms: u64,
    /// Before this time no held entry may be evicted for idleness.
    idle_ms: u64,
}

impl Due {
    const NEVER: Due = Due {
        room_ms: u64::MAX,
        idle_ms: u64::MAX,
    };

    /// Notes an entry used at `last_used_ms` and held through `until_ms`.
    fn note(&mut self, until_ms: u64, last_used_ms: u64, idle_bound_ms: Option<u64>) {
        self.room_ms = self.room_ms.min(until_ms.saturating_add(1));
        if let Some(bound_ms) = idle_bound_ms {
            let idle_at = until_ms.max(last_used_ms.saturating_add(bound_ms));
            self.idle_ms = self.idle_ms.min(idle_at.saturating_add(1));
        }
    }
}

/// What the map needs to decide, for one call.
struct Look<'a, V> {
    now_ms: u64,
    idle_ms: Option<u64>,
    /// Through which time (ms) the owner holds an entry; `None`: not held.
    held_until: &'a dyn Fn(&V) -> Option<u64>,
    /// The owner said an entry may have stopped being held before its time.
    released: &'a AtomicBool,
}

impl<V> Look<'_, V> {
    fn is_idle(&self, entry: &Entry<V>) -> bool {
        self.idle_ms
            .is_some_and(|idle_ms| self.now_ms.saturating_sub(entry.last_used_ms) > idle_ms)
    }

    /// Whether the held set is due a look: a time in it passed, or an entry was released.
    fn due(&self, at_ms: u64) -> bool {
        self.now_ms >= at_ms || self.released.load(Ordering::Acquire)
    }
}

impl<V: Clone> Entries<V> {
    fn len(&self) -> usize {
        self.free.len() + self.held.len()
    }

    /// Puts an entry held through `until_ms` into the held set, and notes when it may go.
    fn hold(&mut self, key: Arc<str>, entry: Entry<V>, until_ms: u64, look: &Look<'_, V>) {
        self.due.note(until_ms, entry.last_used_ms, look.idle_ms);
        self.held.insert(key, entry);
    }

    /// Evicts the entries idle for longer than the bound that are not held.
    fn evict_idle(&mut self, look: &Look<'_, V>, gone: &mut Gone<V>) {
        if look.idle_ms.is_none() {
            return;
        }
        // Least recently used first: the first entry used within the bound ends the scan.
        while let Some((_, entry)) = self.free.peek_lru() {
            if !look.is_idle(entry) {
                break;
            }
            let Some((key, entry)) = self.free.pop_lru() else {
                break;
            };
            match (look.held_until)(&entry.value) {
                Some(until_ms) if look.now_ms <= until_ms => self.hold(key, entry, until_ms, look),
                _ => gone.push((key, entry)),
            }
        }
        if look.due(self.due.idle_ms) {
            self.sweep(look, gone);
        }
    }

    /// Looks through the held set: entries no longer held go back to the free ones (or are
    /// evicted if idle), those whose time passed and that are idle are evicted, and the next
    /// times to look are noted. Returns the least recently used entry whose time has passed.
    fn sweep(&mut self, look: &Look<'_, V>, gone: &mut Gone<V>) -> Option<Arc<str>> {
        // A swap, not a store: it sees (and orders after) a release noted meanwhile.
        look.released.swap(false, Ordering::AcqRel);
        let mut due = Due::NEVER;
        let mut lapsed: Option<(u64, Arc<str>)> = None;
        let mut back = Vec::new();
        self.held
            .retain(|key, entry| match (look.held_until)(&entry.value) {
                Some(until_ms) if look.now_ms <= until_ms || !look.is_idle(entry) => {
                    let older = |(used_ms, _): &(u64, Arc<str>)| entry.last_used_ms < *used_ms;
                    if look.now_ms > until_ms && lapsed.as_ref().is_none_or(older) {
                        lapsed = Some((entry.last_used_ms, Arc::clone(key)));
                    }
                    due.note(until_ms, entry.last_used_ms, look.idle_ms);
                    true
                }
                None if !look.is_idle(entry) => {
                    back.push((Arc::clone(key), entry.clone()));
                    false
                }
                _ => {
                    gone.push((Arc::clone(key), entry.clone()));
                    false
                }
            });
        self.due = due;
        // Least recently used first, so that the free ones stay roughly in order.
        back.sort_by_key(|(_, entry)| entry.last_used_ms);
        for (key, entry) in back {
            self.free.put(key, entry);
        }
        lapsed.map(|(_, key)| key)
    }

    /// Finds the entry to evict to make room for a new one: the least recently used entry not
    /// held, else the least recently used one whose time has passed (entries idle for longer
    /// than the bound may go on the way). `None`: every entry is held.
    fn make_room(
        &mut self,
        capacity: usize,
        look: &Look<'_, V>,
        gone: &mut Gone<V>,
    ) -> Option<Room> {
        // Twice at most: a free entry found held again after a sweep (a race with a trip)
        // costs one more look, never a loop.
        for _ in 0..2 {
            while let Some((_, entry)) = self.free.peek_lru() {
                let Some(until_ms) = (look.held_until)(&entry.value) else {
                    return Some(Room::Evict(Victim::LeastRecentlyUsed));
                };
                if let Some((key, entry)) = self.free.pop_lru() {
                    self.hold(key, entry, until_ms, look);
                }
            }
            if !look.due(self.due.room_ms) {
                return None;
            }
            let lapsed = self.sweep(look, gone);
            if self.len() < capacity {
                return Some(Room::Made); // idle ones went
            }
            if !self.free.is_empty() {
                continue; // released ones came back
            }
            return lapsed.map(|key| Room::Evict(Victim::Held(key)));
        }
        None
    }

    /// Evicts the victim `make_room` chose.
    fn evict(&mut self, victim: Victim, gone: &mut Gone<V>) {
        let evicted = match victim {
            Victim::LeastRecentlyUsed => self.free.pop_lru(),
            Victim::Held(key) => self.held.remove_entry(&key),
        };
        gone.extend(evicted);
    }
}

/// Room for a new entry.
enum Room {
    /// There is room now.
    Made,
    /// There will be once this one is evicted.
    Evict(Victim),
}

/// The entry to evict to make room.
enum Victim {
    /// The least recently used free entry.
    LeastRecentlyUsed,
    /// This held entry, whose time has passed.
    Held(Arc<str>),
}

/// See the module docs. Lookups take a short lock.
pub(crate) struct KeyedMap<V> {
    entries: Mutex<Entries<V>>,
    capacity: NonZeroUsize,
    idle_ms: Option<u64>,
    clock: Arc<dyn Clock>,
    /// An entry may have stopped being held before its time (see [`KeyedMap::note_release`]).
    released: AtomicBool,
}

impl<V> KeyedMap<V> {
    /// At most `capacity` entries; with `idle_ms`, an entry unused for longer is evicted.
    pub(crate) fn new(capacity: NonZeroUsize, idle_ms: Option<u64>, clock: Arc<dyn Clock>) -> Self {
        KeyedMap {
            entries: Mutex::new(Entries {
                free: LruCache::unbounded(),
                held: HashMap::new(),
                due: Due::NEVER,
            }),
            capacity,
            idle_ms,
            clock,
            released: AtomicBool::new(false),
        }
    }

    /// Entries now (idle ones not yet evicted included).
    pub(crate) fn len(&self) -> usize {
        let entries = self.entries.lock();
        entries.free.len() + entries.held.len()
    }

    /// The value for `key` if present, without marking it used.
    pub(crate) fn peek(&self, key: &str) -> Option<V>
    where
        V: Clone,
    {
        let entries = self.entries.lock();
        entries
            .free
            .peek(key)
            .or_else(|| entries.held.get(key))
            .map(|entry| entry.value.clone())
    }

    /// The keys, most recently used first (held entries used in the same millisecond as
    /// others in no particular order among them).
    pub(crate) fn keys(&self) -> Vec<Arc<str>> {
        let entries = self.entries.lock();
        let mut keys: Vec<(u64, Arc<str>)> = entries
            .free
            .iter()
            .chain(entries.held.iter())
            .map(|(key, entry)| (entry.last_used_ms, Arc::clone(key)))
            .collect();
        // Stable: the free entries, first, keep their exact order.
        keys.sort_by_key(|(used_ms, _)| std::cmp::Reverse(*used_ms));
        keys.into_iter().map(|(_, key)| key).collect()
    }

    /// The owner says an entry may have stopped being held before the time it gave (a keyed
    /// breaker closed): the next access looks through the held entries again.
    pub(crate) fn note_release(&self) {
        self.released.store(true, Ordering::Release);
    }
}

impl<V: Clone> KeyedMap<V> {
    /// The value for `key`, marked as used now; made with `make` (given the key as the map
    /// keeps it, to share) if absent, and kept if there is room or room can be made (see the
    /// module docs): `Ok(None)` when every entry is held (nothing was made). `held_until` says
    /// through which time (ms) the owner holds an entry (`None`: not held). Entries evicted to
    /// make room or for idleness are handed to `evicted`. All three run under the map's lock
    /// (so a key is made once, and its eviction's clean-up ends before the key can be made
    /// again); they must not use this map.
    pub(crate) fn get_or_try_insert<E>(
        &self,
        key: &str,
        make: impl FnOnce(&Arc<str>) -> Result<V, E>,
        held_until: impl Fn(&V) -> Option<u64>,
        mut evicted: impl FnMut(&str, V),
    ) -> Result<Option<V>, E> {
        let look = Look {
            now_ms: self.clock.now_ms(),
            idle_ms: self.idle_ms,
            held_until: &held_until,
            released: &self.released,
        };
        let mut gone = Vec::new();
        let mut entries = self.entries.lock();
        let found = if let Some(entry) = entries.free.get_mut(key) {
            entry.last_used_ms = look.now_ms;
            Some(entry.value.clone())
        } else if let Some(entry) = entries.held.get_mut(key) {
            entry.last_used_ms = look.now_ms;
            let value = entry.value.clone();
            if held_until(&value).is_none() {
                // Released and used now: back among the free ones, as the most recently used.
                if let Some((key, entry)) = entries.held.remove_entry(key) {
                    entries.free.put(key, entry);
                }
            }
            Some(value)
        } else {
            None
        };
        let result = match found {
            Some(value) => {
                entries.evict_idle(&look, &mut gone);
                Ok(Some(value))
            }
            None => {
                entries.evict_idle(&look, &mut gone);
                let capacity = self.capacity.get();
                let room = if entries.len() < capacity {
                    Some(Room::Made)
                } else {
                    entries.make_room(capacity, &look, &mut gone)
                };
                match room {
                    None => Ok(None),
                    Some(room) => {
                        let key: Arc<str> = Arc::from(key);
                        // Made before the victim goes: a failed make evicts nothing.
                        make(&key).map(|value| {
                            if let Room::Evict(victim) = room {
                                entries.evict(victim, &mut gone);
                            }
                            let entry = Entry {
                                value: value.clone(),
                                last_used_ms: look.now_ms,
                            };
                            entries.free.put(key, entry);
                            Some(value)
                        })
                    }
                }
            }
        };
        // After `make`, so that a definition made anew for a command key keeps that key's
        // state alive while an evicted one lets go of it.
        for (key, entry) in gone {
            evicted(&key, entry.value);
        }
        drop(entries);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use std::convert::Infallible;
    use std::sync::atomic::AtomicU64;
    use std::time::Duration;

    /// A value: its number, and through which time it is held (0: not held).
    type Value = (u32, Arc<AtomicU64>);

    fn map(capacity: usize, idle_ms: Option<u64>) -> (KeyedMap<Value>, ManualClock) {
        let clock = ManualClock::new();
        let map = KeyedMap::new(
            NonZeroUsize::new(capacity).unwrap(),
            idle_ms,
            Arc::new(clock.clone()),
        );
        (map, clock)
    }

    fn held_until(value: &Value) -> Option<u64> {
        match value.1.load(Ordering::SeqCst) {
            0 => None,
            until => Some(until),
        }
    }

    /// Gets `key` (made with `number`, held through `held` if not 0): the number found, or
    /// `None` for no room, and the keys evicted.
    fn get(map: &KeyedMap<Value>, key: &str, number: u32, held: u64) -> (Option<u32>, Vec<String>) {
        let mut evicted = Vec::new();
        let got = map
            .get_or_try_insert(
                key,
                |_| Ok::<_, Infallible>((number, Arc::new(AtomicU64::new(held)))),
                held_until,
                |key, _| evicted.push(key.to_owned()),
            )
            .unwrap();
        (got.map(|value| value.0), evicted)
    }

    fn keys(map: &KeyedMap<Value>) -> Vec<String> {
        map.keys().iter().map(|key| key.to_string()).collect()
    }

    fn hold(map: &KeyedMap<Value>, key: &str, until: u64) {
        map.peek(key).unwrap().1.store(until, Ordering::SeqCst);
    }

    #[test]
    fn values_are_made_once_and_the_least_recently_used_goes_first() {
        let (map, _) = map(2, None);
        assert_eq!(get(&map, "a", 1, 0), (Some(1), vec![]));
        assert_eq!(get(&map, "b", 2, 0), (Some(2), vec![]));
        assert_eq!(
            get(&map, "a", 9, 0),
            (Some(1), vec![]),
            "kept, not made again"
        );
        assert_eq!(get(&map, "c", 3, 0), (Some(3), vec!["b".to_owned()]));
        assert_eq!(keys(&map), ["c", "a"]);
    }

    #[test]
    fn held_entries_go_only_after_their_time_and_after_the_free_ones() {
        let (map, clock) = map(3, None);
        get(&map, "held", 1, 1000);
        get(&map, "lapses", 2, 500);
        get(&map, "free", 3, 0);
        // "held" and "lapses" are the least recently used, but held: "free" goes.
        assert_eq!(get(&map, "d", 4, 0), (Some(4), vec!["free".to_owned()]));
        // Only "d" is free now; then every entry is held: no room, nothing made or evicted.
        hold(&map, "d", 1000);
        assert_eq!(get(&map, "e", 5, 0), (None, vec![]));
        assert_eq!(map.len(), 3);
        assert!(map.peek("e").is_none());
        // Past 500 "lapses" may go, the least recently used of those whose time has passed.
        clock.advance(Duration::from_millis(500));
        assert_eq!(get(&map, "e", 5, 0), (None, vec![]));
        clock.advance(Duration::from_millis(1));
        assert_eq!(get(&map, "e", 5, 0), (Some(5), vec!["lapses".to_owned()]));
        // A free entry goes before one whose time has passed.
        clock.advance(Duration::from_millis(1000));
        assert_eq!(get(&map, "f", 6, 0), (Some(6), vec!["e".to_owned()]));
        assert_eq!(get(&map, "g", 7, 0), (Some(7), vec!["f".to_owned()]));
    }

    #[test]
    fn a_released_entry_is_free_again_at_once() {
        let (map, _) = map(2, None);
        get(&map, "a", 1, 1000);
        get(&map, "b", 2, 1000);
        assert_eq!(get(&map, "c", 3, 0), (None, vec![]));
        // Its owner lets "a" go before its time: the next new key takes its place.
        hold(&map, "a", 0);
        assert_eq!(get(&map, "c", 3, 0), (None, vec![]), "not told yet");
        map.note_release();
        assert_eq!(get(&map, "c", 3, 0), (Some(3), vec!["a".to_owned()]));
        assert_eq!(keys(&map), ["c", "b"]);
    }

    #[test]
    fn entries_idle_longer_than_the_bound_are_evicted_on_access_unless_held() {
        let (map, clock) = map(10, Some(1000));
        get(&map, "a", 1, 0);
        get(&map, "held", 2, 5000);
        clock.advance(Duration::from_millis(600));
        get(&map, "b", 2, 0);
        clock.advance(Duration::from_millis(400));
        // a was used 1000 ms ago: not longer than the bound yet.
        assert_eq!(get(&map, "b", 2, 0), (Some(2), vec![]));
        clock.advance(Duration::from_millis(1));
        assert_eq!(get(&map, "b", 2, 0), (Some(2), vec!["a".to_owned()]));
        assert_eq!(keys(&map), ["b", "held"]);
        // "held" goes once idle and past its time (5000).
        clock.advance(Duration::from_millis(3999));
        assert_eq!(get(&map, "b", 2, 0), (Some(2), vec![]));
        clock.advance(Duration::from_millis(1));
        assert_eq!(get(&map, "b", 2, 0), (Some(2), vec!["held".to_owned()]));
        assert_eq!(map.len(), 1);
    }

    #[test]
    fn a_failed_make_inserts_nothing_and_evicts_nothing() {
        let (map, _) = map(2, None);
        let err = map.get_or_try_insert("a", |_| Err("bad"), |_| None, |_, _| {});
        assert_eq!(err.err(), Some("bad"));
        assert_eq!(map.len(), 0);
        get(&map, "a", 1, 0);
        get(&map, "b", 2, 0);
        let mut evicted = Vec::new();
        let err = map.get_or_try_insert(
            "c",
            |_| Err("bad"),
            |_| None,
            |key, _| evicted.push(key.to_owned()),
        );
        assert_eq!(err.err(), Some("bad"));
        assert!(evicted.is_empty());
        assert_eq!(keys(&map), ["b", "a"]);
    }
}
