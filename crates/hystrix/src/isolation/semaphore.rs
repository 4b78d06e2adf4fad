//! A try-acquire-only counting semaphore with a dynamic limit (Hystrix's `TryableSemaphore`).
//!
//! Acquire increments the count and, if that passes the limit read at that moment, decrements it
//! again and refuses; it never blocks. Permits are RAII guards, released exactly once on every
//! path (success, error, panic, timeout, drop).

use std::sync::atomic::{AtomicU32, Ordering};

use crossbeam_utils::CachePadded;

/// Permits in use for one command key, on its own cache line.
#[derive(Debug, Default)]
pub(crate) struct Semaphore {
    in_use: CachePadded<AtomicU32>,
}

impl Semaphore {
    /// Takes a permit if fewer than `limit` are in use. A limit of 0 refuses every caller.
    #[cfg(test)]
    pub(crate) fn try_acquire(&self, limit: u32) -> Option<Permit<'_>> {
        let previous = self.in_use.fetch_add(1, Ordering::Acquire);
        if previous >= limit {
            self.in_use.fetch_sub(1, Ordering::Release);
            return None;
        }
        Some(Permit { semaphore: self })
    }

    /// As [`try_acquire`](Semaphore::try_acquire), for a holder that releases with
    /// [`give_back`](Semaphore::give_back) itself (a future cannot hold a guard borrowing from
    /// the state it also owns).
    #[inline]
    pub(crate) fn try_take(&self, limit: u32) -> bool {
        let previous = self.in_use.fetch_add(1, Ordering::Acquire);
        if previous >= limit {
            self.in_use.fetch_sub(1, Ordering::Release);
            return false;
        }
        true
    }

    /// As [`try_take`](Semaphore::try_take), returning how many permits are in use with this
    /// one, or `None` when refused.
    #[inline]
    pub(crate) fn try_take_counted(&self, limit: u32) -> Option<u32> {
        let previous = self.in_use.fetch_add(1, Ordering::SeqCst);
        if previous >= limit {
            self.in_use.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(previous + 1)
    }

    /// Releases a permit taken with [`try_take`](Semaphore::try_take). Sequentially
    /// consistent (the same instruction as a release on x86), so a waiter that looked before
    /// it is seen to wait.
    #[inline]
    pub(crate) fn give_back(&self) {
        self.in_use.fetch_sub(1, Ordering::SeqCst);
    }

    /// Counts one more holder without a limit (a gauge of THREAD-isolated runs).
    #[inline]
    pub(crate) fn enter(&self) -> Permit<'_> {
        self.in_use.fetch_add(1, Ordering::Acquire);
        Permit { semaphore: self }
    }

    /// Counts one more holder without a limit, for a holder admitted by another count
    /// (priority reserves) that gives it back with [`give_back`](Semaphore::give_back).
    #[inline]
    pub(crate) fn enter_counted(&self) {
        self.in_use.fetch_add(1, Ordering::SeqCst);
    }

    /// Permits currently held (a refused attempt may show for an instant).
    pub(crate) fn in_use(&self) -> u32 {
        self.in_use.load(Ordering::Acquire)
    }
}

/// A held permit; dropping it releases the permit.
#[derive(Debug)]
#[must_use = "dropping the permit releases it at once"]
pub(crate) struct Permit<'a> {
    semaphore: &'a Semaphore,
}

impl Drop for Permit<'_> {
    #[inline]
    fn drop(&mut self) {
        self.semaphore.give_back();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_beyond_the_limit_and_releases_on_drop() {
        let semaphore = Semaphore::default();
        let held: Vec<_> = (0..3).filter_map(|_| semaphore.try_acquire(3)).collect();
        assert_eq!(held.len(), 3);
        assert!(semaphore.try_acquire(3).is_none());
        assert_eq!(semaphore.in_use(), 3);
        drop(held);
        assert_eq!(semaphore.in_use(), 0);
    }

    #[test]
    fn limit_is_read_at_each_acquire() {
        let semaphore = Semaphore::default();
        let first = semaphore.try_acquire(1);
        assert!(first.is_some());
        assert!(semaphore.try_acquire(1).is_none());
        let second = semaphore.try_acquire(2);
        assert!(second.is_some());
        assert_eq!(semaphore.in_use(), 2);
    }

    #[test]
    fn zero_limit_refuses_everything() {
        let semaphore = Semaphore::default();
        assert!(semaphore.try_acquire(0).is_none());
        assert_eq!(semaphore.in_use(), 0);
    }

    #[test]
    fn six_concurrent_holders_of_three_permits_leave_exactly_three_rejected() {
        // Hystrix's testSemaphorePermitsInUse, with real threads holding permits at once.
        let semaphore = Semaphore::default();
        let barrier = std::sync::Barrier::new(6);
        let acquired = std::thread::scope(|s| {
            let handles: Vec<_> = (0..6)
                .map(|_| {
                    s.spawn(|| {
                        let permit = semaphore.try_acquire(3);
                        let got = permit.is_some();
                        barrier.wait(); // every thread holds (or not) its permit here
                        got
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap())
                .filter(|got| *got)
                .count()
        });
        assert_eq!(acquired, 3);
        assert_eq!(semaphore.in_use(), 0);
    }
}
