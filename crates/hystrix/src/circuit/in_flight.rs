//! Attempts still running, by start time, so that those running past the slow-call threshold
//! count as slow before they end (`circuitBreaker.slowCall.countInFlight`), without a timer per
//! call.
//!
//! A ring of [`SLOTS`] words, one per health interval of start time: the interval's epoch (24
//! bits) and era (8 bits), its state (2 bits) and how many of its attempts are still running
//! (30 bits). An
//! attempt adds itself to its start interval's word when admitted and takes itself out when it
//! ends, learning the interval's state: the breaker's health check, once per interval, marks
//! every interval whose attempts have all run past the threshold *sampled* and counts those
//! still running as slow; a close marks the intervals started by then *forgotten* (their
//! attempts are of an older generation), and starts a new era of the interval it happens in,
//! so that the attempts started after it in that interval are tracked apart. Every step is
//! one compare-and-swap on one word.
//!
//! A slot is reused for a later interval only once none of its attempts runs, or they were
//! sampled (or are sampled by the reuse, being past the threshold); an attempt that finds its
//! slot still holding younger or forgotten attempts is not tracked (it counts as slow at its
//! end, as without this feature). So thresholds of up to `SLOTS - 2` intervals are tracked.

#[cfg(hystrix_loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(hystrix_loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// Slots in the ring: start intervals tracked at once.
pub(crate) const SLOTS: usize = 64;

const SAMPLED: u64 = 1 << 31;
const FORGOTTEN: u64 = 1 << 30;
const RUNNING: u64 = FORGOTTEN - 1;

/// What an interval's attempts are to the breaker's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Not counted yet.
    Open,
    /// Counted as slow requests while running.
    Sampled,
    /// Left out by a close (they were admitted before it).
    Forgotten,
}

fn pack(epoch: u32, mark: Mark, running: u64) -> u64 {
    let mark = match mark {
        Mark::Open => 0,
        Mark::Sampled => SAMPLED,
        Mark::Forgotten => FORGOTTEN,
    };
    u64::from(epoch) << 32 | mark | running.min(RUNNING)
}

/// The low 24 bits of an epoch: a slot's tag is this, shifted left, and the era's 8 bits (the
/// closes in the interval, modulo 256). With the default 500 ms intervals the epoch bits wrap
/// every 97 days; a slot holds a recent interval.
const EPOCH_MASK: u32 = (1 << 24) - 1;
const ERA_BITS: u32 = 8;

/// The tag of `epoch` in `era`.
fn tag_of(epoch: u64, era: u32) -> u32 {
    (epoch as u32 & EPOCH_MASK) << ERA_BITS | era & 0xFF
}

/// The epoch bits of a tag.
fn epoch_bits(tag: u32) -> u32 {
    tag >> ERA_BITS
}

/// The tag of the next era of a tag's interval.
fn next_era(tag: u32) -> u32 {
    tag_of(u64::from(epoch_bits(tag)), (tag & 0xFF) + 1)
}

fn unpack(word: u64) -> (u32, Mark, u64) {
    let mark = if word & SAMPLED != 0 {
        Mark::Sampled
    } else if word & FORGOTTEN != 0 {
        Mark::Forgotten
    } else {
        Mark::Open
    };
    ((word >> 32) as u32, mark, word & RUNNING)
}

/// Where an attempt was added (its start interval's tag: epoch and era), to take it out at its
/// end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tracked(u32);

/// What adding an attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Added {
    /// Tracked; reusing its slot counted this many older attempts as slow (0 mostly).
    Tracked(Tracked, u64),
    /// Not tracked (its slot holds younger uncounted attempts, forgotten ones, or a later
    /// interval).
    Untracked,
}

/// Where an attempt is for slow calls, beyond its start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum SlowTrack {
    /// Nothing: it is judged at its end.
    #[default]
    None,
    /// Tracked as running, for slow calls counted in flight.
    Running(Tracked),
    /// A stream's first value came: judged on the time to it, `judged_ms` (saturating), and
    /// what its start interval was to the window then.
    FirstValue { judged_ms: u32, mark: Mark },
}

/// Attempts running, by start interval.
#[derive(Debug)]
pub(crate) struct InFlight {
    interval_ms: u64,
    slots: Box<[AtomicU64]>,
}

impl InFlight {
    /// A ring of start intervals of `interval_ms` (the health interval).
    pub(crate) fn new(interval_ms: u64) -> Self {
        InFlight {
            interval_ms: interval_ms.max(1),
            // Epoch u32::MAX, none running: never an interval in use.
            slots: (0..SLOTS)
                .map(|_| AtomicU64::new(pack(u32::MAX, Mark::Sampled, 0)))
                .collect(),
        }
    }

    fn epoch(&self, ms: u64) -> u64 {
        ms / self.interval_ms
    }

    fn slot(&self, epoch: u64) -> &AtomicU64 {
        &self.slots[(epoch % SLOTS as u64) as usize]
    }

    /// Whether every attempt of start interval `epoch` has run longer than `threshold_ms` at
    /// `now_ms`: the latest of them started at the interval's last ms.
    fn all_past(&self, epoch: u64, threshold_ms: u64, now_ms: u64) -> bool {
        let last_start = (epoch + 1) * self.interval_ms - 1;
        now_ms.saturating_sub(last_start) > threshold_ms
    }

    /// The full epoch of a slot's tag, seen at epoch `now` (slots hold recent ones).
    fn full_epoch(now: u64, tag: u32) -> u64 {
        let behind = (now as u32 & EPOCH_MASK).wrapping_sub(epoch_bits(tag)) & EPOCH_MASK;
        now.saturating_sub(u64::from(behind))
    }

    /// Applies `change` to `slot` until it succeeds or declines; returns what it returned.
    fn update<T>(slot: &AtomicU64, mut change: impl FnMut(u64) -> Option<(u64, T)>) -> Option<T> {
        let mut current = slot.load(Ordering::Acquire);
        loop {
            let (next, answer) = change(current)?;
            match slot.compare_exchange_weak(current, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Some(answer),
                Err(seen) => current = seen,
            }
        }
    }

    /// Adds an attempt admitted at `start_ms`, the slow-call threshold being `threshold_ms`.
    pub(crate) fn add(&self, start_ms: u64, threshold_ms: u64) -> Added {
        let epoch = self.epoch(start_ms);
        let mut tag = tag_of(epoch, 0);
        Self::update(self.slot(epoch), |word| {
            let (seen, mark, running) = unpack(word);
            if epoch_bits(seen) == epoch_bits(tag) {
                // Ours, in its current era; once marked, it takes no more.
                tag = seen;
                return (mark == Mark::Open).then(|| (pack(tag, Mark::Open, running + 1), 0));
            }
            tag = tag_of(epoch, 0);
            let seen_epoch = Self::full_epoch(epoch, seen);
            if seen_epoch > epoch {
                return None; // a later interval: this clock read is stale
            }
            match mark {
                _ if running == 0 => Some((pack(tag, Mark::Open, 1), 0)),
                // Its attempts learn at their end that they were counted.
                Mark::Sampled => Some((pack(tag, Mark::Open, 1), 0)),
                // Its attempts must learn they were left out: the slot waits for them.
                Mark::Forgotten => None,
                // Slow by now: counted here, the slot is ours.
                Mark::Open if self.all_past(seen_epoch, threshold_ms, start_ms) => {
                    Some((pack(tag, Mark::Open, 1), running))
                }
                Mark::Open => None,
            }
        })
        .map_or(Added::Untracked, |flushed| {
            Added::Tracked(Tracked(tag), flushed)
        })
    }

    /// Takes out an attempt that ended; returns what its interval was to the window.
    pub(crate) fn remove(&self, tracked: Tracked) -> Mark {
        let Tracked(tag) = tracked;
        let slot = &self.slots[(u64::from(epoch_bits(tag)) % SLOTS as u64) as usize];
        let mut gone = Mark::Sampled;
        Self::update(slot, |word| {
            let (seen, mark, running) = unpack(word);
            if seen != tag {
                // A new era of its interval began at a close: it was forgotten. Another
                // interval: the slot was reused, only once its attempts were sampled.
                if epoch_bits(seen) == epoch_bits(tag) {
                    gone = Mark::Forgotten;
                }
                return None;
            }
            Some((pack(tag, mark, running.saturating_sub(1)), mark))
        })
        .unwrap_or(gone)
    }

    /// Marks the intervals whose attempts have all run longer than `threshold_ms` at `now_ms`
    /// as sampled; returns how many of their attempts are still running (now slow).
    pub(crate) fn count_slow(&self, now_ms: u64, threshold_ms: u64) -> u64 {
        let now = self.epoch(now_ms);
        let mut slow = 0;
        for slot in self.slots.iter() {
            slow += Self::update(slot, |word| {
                let (seen, mark, running) = unpack(word);
                let epoch = Self::full_epoch(now, seen);
                (mark == Mark::Open
                    && running > 0
                    && epoch <= now
                    && self.all_past(epoch, threshold_ms, now_ms))
                .then(|| (pack(seen, Mark::Sampled, running), running))
            })
            .unwrap_or(0);
        }
        slow
    }

    /// The breaker closed at `now_ms`: the attempts running that started in this interval or
    /// before are left out of the new window (they are of an older generation), and this
    /// interval's slot starts a new era, for the attempts that start after the close in it.
    pub(crate) fn forget_started_by(&self, now_ms: u64) {
        let now = self.epoch(now_ms);
        for slot in self.slots.iter() {
            Self::update(slot, |word| {
                let (seen, mark, running) = unpack(word);
                (mark == Mark::Open && Self::full_epoch(now, seen) <= now)
                    .then(|| (pack(seen, Mark::Forgotten, running), ()))
            });
        }
        Self::update(self.slot(now), |word| {
            let (seen, _, _) = unpack(word);
            (epoch_bits(seen) == epoch_bits(tag_of(now, 0)))
                .then(|| (pack(next_era(seen), Mark::Open, 0), ()))
        });
    }

    /// Bytes on the heap.
    pub(crate) fn heap_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }
}

#[cfg(all(test, not(hystrix_loom)))]
mod tests {
    use super::*;

    #[test]
    fn attempts_past_the_threshold_count_once() {
        // Intervals of 100 ms, threshold 250 ms.
        let in_flight = InFlight::new(100);
        let Added::Tracked(first, 0) = in_flight.add(10, 250) else {
            panic!("tracked");
        };
        let Added::Tracked(second, 0) = in_flight.add(99, 250) else {
            panic!("tracked");
        };
        let Added::Tracked(late, 0) = in_flight.add(150, 250) else {
            panic!("tracked");
        };
        // The attempt that started at 99 ms has run 250 ms at 349: not longer yet.
        assert_eq!(in_flight.count_slow(349, 250), 0);
        assert_eq!(
            in_flight.remove(second),
            Mark::Open,
            "ended before it was counted"
        );
        assert_eq!(
            in_flight.count_slow(350, 250),
            1,
            "the one started at 10 ms"
        );
        assert_eq!(in_flight.count_slow(350, 250), 0, "counted once");
        assert_eq!(in_flight.remove(first), Mark::Sampled, "its end knows");
        assert_eq!(
            in_flight.count_slow(450, 250),
            1,
            "the one started at 150 ms"
        );
        assert_eq!(in_flight.remove(late), Mark::Sampled);
    }

    #[test]
    fn a_close_forgets_the_attempts_started_by_then() {
        let in_flight = InFlight::new(100);
        let Added::Tracked(before, 0) = in_flight.add(50, 100) else {
            panic!("tracked");
        };
        in_flight.forget_started_by(120);
        // Started in the close's interval, after it: tracked in the interval's new era.
        let Added::Tracked(same_interval, 0) = in_flight.add(130, 100) else {
            panic!("tracked");
        };
        let Added::Tracked(after, 0) = in_flight.add(200, 100) else {
            panic!("tracked");
        };
        // The attempts started after the close are counted, the one before is not.
        assert_eq!(in_flight.count_slow(1_000, 100), 2);
        assert_eq!(in_flight.remove(before), Mark::Forgotten);
        assert_eq!(in_flight.remove(same_interval), Mark::Sampled);
        assert_eq!(in_flight.remove(after), Mark::Sampled);
    }

    #[test]
    fn a_forgotten_slot_whose_attempts_ended_is_taken_again() {
        let in_flight = InFlight::new(100);
        let Added::Tracked(old, 0) = in_flight.add(50, 100) else {
            panic!("tracked");
        };
        in_flight.forget_started_by(120);
        assert_eq!(in_flight.remove(old), Mark::Forgotten);
        // 64 intervals later, the same slot: nothing of its old interval runs, so it is free.
        let start = 50 + SLOTS as u64 * 100;
        let Added::Tracked(new, 0) = in_flight.add(start, 100) else {
            panic!("tracked");
        };
        assert_eq!(in_flight.count_slow(start + 1_000, 100), 1);
        assert_eq!(in_flight.remove(new), Mark::Sampled);
    }

    #[test]
    fn each_close_in_an_interval_starts_a_new_era() {
        let in_flight = InFlight::new(100);
        let Added::Tracked(first, 0) = in_flight.add(10, 100) else {
            panic!("tracked");
        };
        in_flight.forget_started_by(20);
        let Added::Tracked(second, 0) = in_flight.add(30, 100) else {
            panic!("tracked");
        };
        in_flight.forget_started_by(40);
        let Added::Tracked(third, 0) = in_flight.add(50, 100) else {
            panic!("tracked");
        };
        // Only the attempt of the latest era counts; the others were left out at a close.
        assert_eq!(in_flight.count_slow(1_000, 100), 1);
        assert_eq!(in_flight.remove(first), Mark::Forgotten);
        assert_eq!(in_flight.remove(second), Mark::Forgotten);
        assert_eq!(in_flight.remove(third), Mark::Sampled);
    }

    #[test]
    fn a_slot_is_reused_only_once_its_attempts_can_be_counted() {
        let in_flight = InFlight::new(100);
        let Added::Tracked(old, 0) = in_flight.add(0, 10_000) else {
            panic!("tracked");
        };
        // 64 intervals later the same slot: its attempt has run 6.4 s, not past 10 s.
        assert_eq!(in_flight.add(6_400, 10_000), Added::Untracked);
        // With a threshold of 5 s it is slow: the slot is reused and the old attempt counted.
        let Added::Tracked(_, 1) = in_flight.add(6_400, 5_000) else {
            panic!("reused");
        };
        assert_eq!(in_flight.remove(old), Mark::Sampled, "counted at the reuse");
    }
}

#[cfg(all(test, hystrix_loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// An attempt ends while the health check counts its interval: it is counted exactly once,
    /// either by the check (and its end says so) or by its end (the check finds none running).
    #[test]
    fn an_attempt_ending_during_the_count_is_counted_once() {
        loom::model(|| {
            let in_flight = Arc::new(InFlight::new(100));
            let Added::Tracked(tracked, 0) = in_flight.add(0, 50) else {
                panic!("tracked");
            };
            let ender = {
                let in_flight = Arc::clone(&in_flight);
                thread::spawn(move || in_flight.remove(tracked))
            };
            let counted_by_check = in_flight.count_slow(200, 50);
            let seen_at_end = ender.join().unwrap();
            assert_eq!(counted_by_check == 1, seen_at_end == Mark::Sampled);
        });
    }
}
