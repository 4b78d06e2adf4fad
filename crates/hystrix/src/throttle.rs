//! Client-side adaptive throttling (`execution.throttle.*`), from the Google SRE book, chapter
//! "Handling Overload": a client that sees its backend reject requests as overloaded refuses
//! some of its own requests locally, before they reach the backend, so that the backend spends
//! less of its capacity on rejecting.
//!
//! Each command key counts, over a rolling window (`execution.throttle.windowInMilliseconds`,
//! two minutes by default, in `execution.throttle.numBuckets` buckets, the bucket filling
//! included):
//!
//! - **requests**: attempts that ran (their run started and its end was decided) and attempts
//!   throttled;
//! - **accepts**: attempts that ran and that the backend did not reject as overloaded, i.e.
//!   whose error, if any, the classifier's retry answer does not mark
//!   [`overloaded`](crate::retry::RetryAnswer::overloaded) (a success, a failure of another kind, a
//!   timeout, a panic: all accepts).
//!
//! Before an attempt runs it is refused locally (THROTTLED) with probability
//! [`probability`]`(requests, accepts, K)` = max(0, (requests − K × accepts) / (requests + 1)),
//! K being `execution.throttle.multiplier` (default 2, the book's). While the backend accepts
//! everything the probability is 0; when it accepts almost nothing, the backend still receives
//! about K × accepts requests per window (the rest are throttled), so K is the share of
//! rejections a client tolerates: the lower K, the less the backend wastes on rejecting, and
//! the slower the client notices that the backend recovered.
//!
//! Attempts refused locally for other reasons (circuit breaker, semaphore, pool, adaptive
//! limit) count as neither: they did not reach the backend and were not throttled.
//!
//! **Where it stands in the pipeline**: after the circuit breaker (a short-circuited attempt is
//! not drawn for) and before the execution permit, the adaptive limit and the pool, so a
//! throttled attempt takes no permit and no place (nothing to give back); its breaker ticket is
//! given back, as for LIMIT_REJECTED. A hedge is drawn for too, before it asks the breaker; a
//! throttled hedge is skipped silently (counted as a request, as any throttled attempt). An
//! attempt that lost a hedging race is cancelled before its end is decided: it is counted
//! neither as a request nor as an accept (the winner is).
//!
//! The draws come from a seeded source: each draw seeds a generator from a per-key counter
//! started from [`RegistryBuilder::random_seed`](crate::RegistryBuilder::random_seed) (mixed
//! with the key's name), so a fixed seed repeats the throttled attempts exactly.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arc_swap::ArcSwapOption;

use crate::config::HotCommandProperties;
use crate::metrics::ThrottleSnapshot;
use crate::metrics::rolling::{RollingCounts, View};

const REQUESTS: usize = 0;
const ACCEPTS: usize = 1;

/// The probability (0 to 1) with which client-side adaptive throttling refuses an attempt
/// locally: max(0, (requests − multiplier × accepts) / (requests + 1)), the formula of the
/// Google SRE book, chapter "Handling Overload" (where the multiplier K is 2).
///
/// `requests`: attempts that ran or were throttled in the window; `accepts`: those that ran and
/// that the backend did not reject as overloaded; `multiplier`: K, at least 1.
///
/// ```
/// use hystrix::throttle::probability;
///
/// // 10 requests, 3 accepted, K = 2: 4 of 11.
/// assert_eq!(probability(10, 3, 2.0), 4.0 / 11.0);
/// // A backend accepting at least half of the requests is not throttled with K = 2.
/// assert_eq!(probability(10, 5, 2.0), 0.0);
/// ```
pub fn probability(requests: u64, accepts: u64, multiplier: f64) -> f64 {
    // Counts of one window stay far below 2^53: exact as f64.
    #[allow(clippy::cast_precision_loss)]
    let (requests, accepts) = (requests as f64, accepts as f64);
    ((requests - multiplier * accepts) / (requests + 1.0)).max(0.0)
}

/// One command key's throttling state: the rolling counts and the random source of the draws
/// (boxed in the key's state, off the hot path).
#[derive(Debug)]
pub(crate) struct Throttle {
    /// The window of the current `windowInMilliseconds` and `numBuckets` (made at the first
    /// use, made anew, empty, when either changes).
    window: ArcSwapOption<Window>,
    /// Each draw seeds a generator from this counter's next value.
    random: AtomicU64,
}

/// Requests and accepts over the last `window_ms`, lock-free.
#[derive(Debug)]
struct Window {
    counts: RollingCounts<2>,
    view: View,
    window_ms: u64,
    buckets: u32,
}

impl Window {
    fn new(window_ms: u64, buckets: u32) -> Self {
        let bucket_ms = (window_ms / u64::from(buckets.max(1))).max(1);
        let view = View::new(bucket_ms, bucket_ms, buckets);
        Window {
            counts: RollingCounts::new(bucket_ms, view.fine_buckets_kept()),
            view,
            window_ms,
            buckets,
        }
    }

    /// Requests and accepts in the window at `now_ms` (the bucket filling included).
    fn counts(&self, now_ms: u64) -> (u64, u64) {
        let recent = self.view.recent(now_ms);
        let sum = |index: usize| {
            self.counts.sum_by(recent.clone(), |counters, tag| {
                u64::from(counters[index].get(tag))
            })
        };
        (sum(REQUESTS), sum(ACCEPTS))
    }
}

/// A throttled attempt: the probability it was refused with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Throttled(pub(crate) f64);

impl Throttle {
    /// A throttle whose draws start from `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Throttle {
            window: ArcSwapOption::const_empty(),
            // Apart from the retry jitter's sequence, which starts from the same key seed.
            random: AtomicU64::new(seed ^ 0x9e37_79b9_7f4a_7c15),
        }
    }

    /// The window of the properties published in `hot`.
    fn window(&self, hot: &HotCommandProperties) -> Arc<Window> {
        let (window_ms, buckets) = hot.throttle_window();
        let current = self.window.load();
        if let Some(window) = current.as_ref()
            && window.window_ms == window_ms
            && window.buckets == buckets
        {
            return Arc::clone(window);
        }
        drop(current);
        let fresh = Arc::new(Window::new(window_ms, buckets));
        let previous = self.window.rcu(|current| match current {
            Some(window) if window.window_ms == window_ms && window.buckets == buckets => {
                Some(Arc::clone(window))
            }
            _ => Some(Arc::clone(&fresh)),
        });
        match previous {
            // Another thread made the same window first.
            Some(window) if window.window_ms == window_ms && window.buckets == buckets => window,
            _ => fresh,
        }
    }

    /// An attempt is about to run at `now_ms`: whether it is throttled (then counted as a
    /// request). An attempt let through is counted when its end is decided
    /// ([`ran`](Self::ran)).
    pub(crate) fn admit(&self, hot: &HotCommandProperties, now_ms: u64) -> Result<(), Throttled> {
        let window = self.window(hot);
        let (requests, accepts) = window.counts(now_ms);
        let p = probability(requests, accepts, hot.throttle_multiplier());
        if p > 0.0 && self.draw() < p {
            window.counts.add(now_ms, REQUESTS, 1);
            return Err(Throttled(p));
        }
        Ok(())
    }

    /// An attempt's run ended at `now_ms`: a request, and an accept unless the backend
    /// rejected it as `overloaded`.
    pub(crate) fn ran(&self, hot: &HotCommandProperties, now_ms: u64, overloaded: bool) {
        let window = self.window(hot);
        window.counts.add(now_ms, REQUESTS, 1);
        if !overloaded {
            window.counts.add(now_ms, ACCEPTS, 1);
        }
    }

    /// The window's counts and the probability at `now_ms`.
    pub(crate) fn snapshot(&self, hot: &HotCommandProperties, now_ms: u64) -> ThrottleSnapshot {
        let (requests, accepts) = self.window(hot).counts(now_ms);
        ThrottleSnapshot {
            requests,
            accepts,
            probability: probability(requests, accepts, hot.throttle_multiplier()),
        }
    }

    /// A uniform draw in `[0, 1)`.
    fn draw(&self) -> f64 {
        let seed = self.random.fetch_add(1, Ordering::Relaxed);
        fastrand::Rng::with_seed(seed).f64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::CommandProperties;

    #[test]
    fn the_probability_is_the_sre_books_formula() {
        assert_eq!(probability(10, 3, 2.0), (10.0 - 6.0) / 11.0);
        assert_eq!(probability(100, 0, 2.0), 100.0 / 101.0);
        assert_eq!(probability(100, 10, 1.1), (100.0 - 11.0) / 101.0);
        // No requests, or enough accepts: never throttled.
        assert_eq!(probability(0, 0, 2.0), 0.0);
        assert_eq!(probability(10, 5, 2.0), 0.0);
        assert_eq!(probability(10, 10, 1.0), 0.0);
        // K = 1 throttles as soon as one request was not accepted.
        assert_eq!(probability(10, 9, 1.0), 1.0 / 11.0);
        // Always below 1.
        assert!(probability(u64::from(u32::MAX), 0, 1.0) < 1.0);
    }

    fn hot(window_ms: u64, buckets: u32, multiplier: f64) -> HotCommandProperties {
        let hot = HotCommandProperties::default();
        hot.publish(&CommandProperties {
            execution_throttle_enabled: true,
            execution_throttle_window_in_milliseconds: window_ms,
            execution_throttle_num_buckets: buckets,
            execution_throttle_multiplier: multiplier,
            ..CommandProperties::default()
        });
        hot
    }

    #[test]
    fn requests_and_accepts_roll_out_of_the_window() {
        let hot = hot(1_000, 10, 2.0);
        let throttle = Throttle::new(7);
        for _ in 0..3 {
            throttle.ran(&hot, 0, false);
        }
        for _ in 0..7 {
            throttle.ran(&hot, 50, true);
        }
        let at = |now_ms| throttle.snapshot(&hot, now_ms);
        assert_eq!((at(999).requests, at(999).accepts), (10, 3));
        assert_eq!(at(999).probability, 4.0 / 11.0);
        assert_eq!((at(1_000).requests, at(1_000).accepts), (0, 0));
        assert_eq!(at(1_000).probability, 0.0);
    }

    #[test]
    fn a_new_window_starts_empty() {
        let throttle = Throttle::new(7);
        let before = hot(1_000, 10, 2.0);
        throttle.ran(&before, 0, true);
        assert_eq!(throttle.snapshot(&before, 0).requests, 1);
        let after = hot(2_000, 10, 2.0);
        assert_eq!(throttle.snapshot(&after, 0).requests, 0);
    }

    #[test]
    fn a_changed_window_is_made_once_and_then_kept() {
        let throttle = Throttle::new(7);
        let before = hot(1_000, 10, 2.0);
        throttle.ran(&before, 0, true);
        // Only the length changes, then only the number of buckets: each time the first call
        // makes the new window, and the next ones count in it.
        for after in [hot(2_000, 10, 2.0), hot(2_000, 20, 2.0)] {
            throttle.ran(&after, 0, true);
            throttle.ran(&after, 0, false);
            let snapshot = throttle.snapshot(&after, 0);
            assert_eq!((snapshot.requests, snapshot.accepts), (2, 1));
        }
    }

    #[test]
    fn an_attempt_that_cannot_be_throttled_takes_no_draw() {
        let hot = hot(1_000, 10, 2.0);
        let throttle = Throttle::new(7);
        let seed = throttle.random.load(Ordering::Relaxed);
        throttle.ran(&hot, 0, false);
        for _ in 0..5 {
            assert_eq!(throttle.admit(&hot, 0), Ok(()));
        }
        // The seeded sequence moves only when an attempt may be refused.
        assert_eq!(throttle.random.load(Ordering::Relaxed), seed);
    }

    #[test]
    fn the_draws_repeat_with_the_seed() {
        let hot = hot(1_000, 10, 2.0);
        let throttled = |seed| {
            let throttle = Throttle::new(seed);
            throttle.ran(&hot, 0, true);
            // p = 1/2 at first, then growing with each throttled request.
            (0..100)
                .map(|_| throttle.admit(&hot, 0).is_err())
                .collect::<Vec<_>>()
        };
        assert_eq!(throttled(1), throttled(1));
        assert_ne!(throttled(1), throttled(2));
    }
}
