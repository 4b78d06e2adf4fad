//! [`Windowed`]: samples aggregated over a window before the algorithm sees them.

use std::time::Duration;

use super::{LimitAlgorithm, LimitError, Sample};

const NAME: &str = "Windowed";

/// A wrapper that feeds its algorithm one sample per window of `window_size` samples, as Netflix
/// concurrency-limits' `WindowedLimit` with its `AverageSampleWindow`: the window's sample has
/// the **mean run time** of its samples, the **largest in-flight count** among them, and is a
/// **drop if any** of them was. Between windows the limit does not move.
///
/// Averaging takes the noise of single run times out of the delay-based algorithms: the minimum
/// of window means that [`Vegas`](super::Vegas) takes as its unloaded run time is the mean of an
/// unqueued window, not the fastest of thousands of runs, and [`Gradient2`](super::Gradient2)
/// compares its long-term average with a window's mean rather than with one run.
///
/// Differences from the anchor: its window closes on time (at least twice the fastest run in it,
/// between `minWindowTime` and `maxWindowTime`, 1 s by default) once it holds at least
/// `windowSize` (10) samples; this type is pure (a [`Sample`] has no time stamp), so its window
/// closes after exactly `window_size` samples. The anchor also drops samples faster than
/// `minRttThreshold` (100 µs), drops included; here every sample counts (a drop answered at once
/// is a drop all the same). The sum of run times saturates at `Duration::MAX`.
///
/// A `window_size` of 1 passes every sample through unchanged.
///
/// ```
/// use hystrix::limit::{Aimd, LimitAlgorithm, Sample, Windowed};
/// use std::time::Duration;
///
/// let ms = |n| Duration::from_millis(n);
/// let mut limit = Windowed::new(Aimd::builder().initial_limit(10).build()?, 3)?;
/// // Nothing moves until the third sample closes the window.
/// assert_eq!(limit.on_sample(Sample::new(ms(10), 4, false)), 10);
/// assert_eq!(limit.on_sample(Sample::new(ms(30), 6, false)), 10);
/// // The window: mean 20 ms, in flight max(4, 6, 3) = 6 ≥ 10 / 2, no drop: AIMD adds 1.
/// assert_eq!(limit.on_sample(Sample::new(ms(20), 3, false)), 11);
/// // One drop among three makes a drop: 11 × 0.9 = 9.9 → 9.
/// limit.on_sample(Sample::new(ms(10), 6, true));
/// limit.on_sample(Sample::new(ms(10), 6, false));
/// assert_eq!(limit.on_sample(Sample::new(ms(10), 6, false)), 9);
/// # Ok::<(), hystrix::limit::LimitError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Windowed<A> {
    inner: A,
    window_size: u32,
    count: u32,
    rtt_sum: Duration,
    max_in_flight: u32,
    dropped: bool,
}

impl<A: LimitAlgorithm> Windowed<A> {
    /// `inner` fed one sample per `window_size` samples.
    ///
    /// # Errors
    ///
    /// A [`LimitError`] for a `window_size` of 0 (no window would ever close).
    pub fn new(inner: A, window_size: u32) -> Result<Self, LimitError> {
        if window_size == 0 {
            return Err(LimitError::new(
                NAME,
                "window_size",
                "must be at least 1: a window of 0 samples never closes".to_string(),
            ));
        }
        Ok(Self {
            inner,
            window_size,
            count: 0,
            rtt_sum: Duration::ZERO,
            max_in_flight: 0,
            dropped: false,
        })
    }

    /// The wrapped algorithm.
    pub fn inner(&self) -> &A {
        &self.inner
    }

    /// How many samples make a window.
    pub fn window_size(&self) -> u32 {
        self.window_size
    }
}

impl<A: LimitAlgorithm> LimitAlgorithm for Windowed<A> {
    #[inline]
    fn on_sample(&mut self, sample: Sample) -> u32 {
        self.count += 1;
        self.rtt_sum = self.rtt_sum.saturating_add(sample.rtt);
        self.max_in_flight = self.max_in_flight.max(sample.in_flight);
        self.dropped |= sample.dropped;
        if self.count < self.window_size {
            return self.inner.limit();
        }
        let window = Sample::new(self.rtt_sum / self.count, self.max_in_flight, self.dropped);
        self.count = 0;
        self.rtt_sum = Duration::ZERO;
        self.max_in_flight = 0;
        self.dropped = false;
        self.inner.on_sample(window)
    }

    #[inline]
    fn limit(&self) -> u32 {
        self.inner.limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::{Aimd, Vegas};

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_window_of_one_passes_samples_through() {
        let mut plain = Vegas::default();
        let mut windowed = Windowed::new(Vegas::default(), 1).unwrap();
        for (rtt, in_flight, dropped) in [(10, 10, false), (10, 12, false), (20, 13, false)] {
            let s = Sample::new(ms(rtt), in_flight, dropped);
            assert_eq!(windowed.on_sample(s), plain.on_sample(s));
        }
        assert_eq!(windowed.limit(), 25);
        assert_eq!(windowed.window_size(), 1);
    }

    #[test]
    fn vegas_takes_the_mean_of_a_window_as_unloaded() {
        let mut v = Windowed::new(Vegas::default(), 4).unwrap();
        assert_eq!(v.window_size(), 4);
        // Window 1: mean (50 + 150 + 100 + 100) / 4 = 100 ms: the first, rtt_noload.
        for rtt in [50, 150, 100] {
            assert_eq!(v.on_sample(Sample::new(ms(rtt), 10, false)), 20);
        }
        assert_eq!(v.on_sample(Sample::new(ms(100), 10, false)), 20);
        assert_eq!(v.inner().rtt_noload(), Some(ms(100)));
        // Window 2: mean 100 ms, in flight max 10 (not 10 × 2 < 20): queue 0, 20 + beta 6.
        for rtt in [60, 140, 90] {
            assert_eq!(v.on_sample(Sample::new(ms(rtt), 3, false)), 20);
        }
        assert_eq!(v.on_sample(Sample::new(ms(110), 10, false)), 26);
        // Window 3: mean 200 ms: queue = ceil(26 × 0.5) = 13 > 6: 26 − 1; a 50 ms run alone
        // would have been the new minimum.
        for rtt in [50, 350, 200] {
            v.on_sample(Sample::new(ms(rtt), 13, false));
        }
        assert_eq!(v.on_sample(Sample::new(ms(200), 13, false)), 25);
        assert_eq!(v.inner().rtt_noload(), Some(ms(100)));
    }

    #[test]
    fn any_drop_makes_the_window_a_drop() {
        let mut a = Windowed::new(Aimd::builder().initial_limit(10).build().unwrap(), 2).unwrap();
        a.on_sample(Sample::new(Duration::ZERO, 1, true));
        // Mean 5 ms, in flight max(1, 1), dropped: 10 × 0.9 = 9.
        assert_eq!(a.on_sample(Sample::new(ms(10), 1, false)), 9);
        // The next window starts afresh: two fast runs with 5 in flight (≥ 9 / 2): 9 + 1.
        a.on_sample(Sample::new(ms(10), 5, false));
        assert_eq!(a.on_sample(Sample::new(ms(10), 5, false)), 10);
    }

    #[test]
    fn refuses_a_window_of_zero() {
        let err = Windowed::new(Vegas::default(), 0).unwrap_err();
        assert_eq!(
            (err.algorithm(), err.parameter()),
            ("Windowed", "window_size")
        );
    }
}
