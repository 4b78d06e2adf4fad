//! [`Gradient2`]: the ratio of a long-term average run time to the latest run time.

use super::{Bounds, LimitAlgorithm, LimitError, Sample, check_smoothing, floor_limit, nanos};

const NAME: &str = "Gradient2";

/// How many first samples the long-term average is a plain mean of, as the anchor's
/// `ExpAvgMeasurement(longWindow, 10)`.
const WARMUP_SAMPLES: u32 = 10;

/// The factor a drop multiplies the estimate by: AIMD's default `backoffRatio` (and the
/// anchor's `AIMDLimit`'s), the loss-based back-off this type adds to the anchor's delay rule.
pub(super) const DROP_BACKOFF: f64 = 0.9;

/// A delay-based limit, as Netflix concurrency-limits' `Gradient2Limit`: it compares an
/// exponentially smoothed long-term average run time with the latest run time, and lets the
/// limit grow by a fixed queue allowance while the latest is not much slower than the average.
///
/// The limit is kept as a fractional estimate; [`limit`](LimitAlgorithm::limit) is its floor.
/// For each sample with a run time `rtt` above zero (a zero run time carries no latency
/// information and leaves everything unchanged; the anchor's arithmetic is undefined for it):
///
/// 1. the long-term average `long` takes `rtt` in: the plain mean of the first 10 samples,
///    then `long ← long × (1 − f) + rtt × f` with `f = 2 / (long_window + 1)`;
/// 2. if `long / rtt > 2` (latency has come back down after a long overload), the stored average
///    is multiplied by 0.95 so that it recovers faster (this sample still uses the `long` of
///    step 1);
/// 3. if `in_flight < estimate / 2`, the caller does not use its limit: nothing more changes;
/// 4. otherwise `gradient = clamp(rtt_tolerance × long / rtt, 0.5, 1)`,
///    `new = estimate × gradient + queue_size`,
///    `estimate ← clamp(estimate × (1 − smoothing) + new × smoothing, min_limit, max_limit)`.
///
/// A **drop** (a timeout or an overload error, whatever its run time) skips all of the above:
/// `estimate ← clamp(estimate × 0.9, min_limit, max_limit)`, and its run time does not enter the
/// long-term average. This differs from the anchor, which ignores the `dropped` flag and
/// averages the drop's run time: a refusal answered at once then looks like a fast run (the
/// limit grows while the dependency refuses), and a timeout's run time, cut at the timeout,
/// raises the long-term average that every later run is judged against. 0.9 is AIMD's default
/// back-off (the anchor's `AIMDLimit` too): a drop is the loss signal a delay rule cannot see
/// when the dependency refuses or times out instead of queueing.
///
/// Defaults, as the anchor's unless marked: initial limit 20, minimum 1 (the anchor's is 20),
/// maximum 200 (`maxConcurrency`), smoothing 0.2, queue size 4, long window 600 samples,
/// RTT tolerance 1.5. The anchor's queue size may also be a function of the limit; here it is a
/// constant.
///
/// ```
/// use hystrix::limit::{Gradient2, LimitAlgorithm, Sample};
/// use std::time::Duration;
///
/// let mut gradient = Gradient2::builder().initial_limit(10).smoothing(1.0).build()?;
/// let ms = |n| Duration::from_millis(n);
/// // First sample: long = 10 ms, gradient = min(1, 1.5 × 10 / 10) = 1, 10 × 1 + 4 = 14.
/// assert_eq!(gradient.on_sample(Sample::new(ms(10), 10, false)), 14);
/// // long = (10 + 50) / 2 = 30 ms, gradient = 1.5 × 30 / 50 = 0.9, 14 × 0.9 + 4 = 16.6.
/// assert_eq!(gradient.on_sample(Sample::new(ms(50), 10, false)), 16);
/// # Ok::<(), hystrix::limit::LimitError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Gradient2 {
    estimate: f64,
    bounds: Bounds,
    smoothing: f64,
    queue_size: u32,
    rtt_tolerance: f64,
    long_rtt: ExpAverage,
}

impl Gradient2 {
    /// A builder with the defaults (see [`Gradient2`]).
    pub fn builder() -> Gradient2Builder {
        Gradient2Builder::default()
    }

    /// The long-term average run time so far, rounded to the nanosecond (zero before the first
    /// sample).
    #[must_use]
    pub fn long_rtt(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.long_rtt.value.round() as u64)
    }

    fn from_valid(b: Gradient2Builder) -> Self {
        Self {
            estimate: f64::from(b.bounds.initial),
            bounds: b.bounds,
            smoothing: b.smoothing,
            queue_size: b.queue_size,
            rtt_tolerance: b.rtt_tolerance,
            long_rtt: ExpAverage::new(b.long_window),
        }
    }
}

impl Default for Gradient2 {
    /// A `Gradient2` with the defaults (see [`Gradient2`]).
    fn default() -> Self {
        Self::from_valid(Gradient2Builder::default())
    }
}

impl LimitAlgorithm for Gradient2 {
    fn on_sample(&mut self, sample: Sample) -> u32 {
        if sample.dropped {
            let backed_off = self.estimate * DROP_BACKOFF;
            self.estimate = self.bounds.clamp_f64(backed_off);
            return self.limit();
        }
        if sample.rtt.is_zero() {
            return self.limit();
        }
        let short = nanos(sample.rtt);
        let long = self.long_rtt.add(short);
        if long / short > 2.0 {
            self.long_rtt.value *= 0.95;
        }
        if f64::from(sample.in_flight) < self.estimate / 2.0 {
            return self.limit();
        }
        let gradient = (self.rtt_tolerance * long / short).clamp(0.5, 1.0);
        let new = self.estimate * gradient + f64::from(self.queue_size);
        let smoothed = self.estimate * (1.0 - self.smoothing) + new * self.smoothing;
        self.estimate = self.bounds.clamp_f64(smoothed);
        self.limit()
    }

    fn limit(&self) -> u32 {
        floor_limit(self.estimate)
    }
}

/// The anchor's `ExpAvgMeasurement`: a plain mean over the first [`WARMUP_SAMPLES`], then an
/// exponential moving average with factor `2 / (window + 1)`. Values in nanoseconds.
#[derive(Debug, Clone)]
struct ExpAverage {
    value: f64,
    sum: f64,
    count: u32,
    factor: f64,
}

impl ExpAverage {
    fn new(window: u32) -> Self {
        Self {
            value: 0.0,
            sum: 0.0,
            count: 0,
            factor: 2.0 / (f64::from(window) + 1.0),
        }
    }

    fn add(&mut self, sample: f64) -> f64 {
        if self.count < WARMUP_SAMPLES {
            self.count += 1;
            self.sum += sample;
            self.value = self.sum / f64::from(self.count);
        } else {
            self.value = self.value * (1.0 - self.factor) + sample * self.factor;
        }
        self.value
    }
}

/// The parameters of a [`Gradient2`]; [`build`](Gradient2Builder::build) checks them.
#[derive(Debug, Clone)]
#[must_use]
pub struct Gradient2Builder {
    bounds: Bounds,
    smoothing: f64,
    queue_size: u32,
    long_window: u32,
    rtt_tolerance: f64,
}

impl Default for Gradient2Builder {
    fn default() -> Self {
        Self {
            bounds: Bounds::with_max(200),
            smoothing: 0.2,
            queue_size: 4,
            long_window: 600,
            rtt_tolerance: 1.5,
        }
    }
}

impl Gradient2Builder {
    bounds_setters!(min: "; the anchor's is 20", max: "200, as the anchor's `maxConcurrency`");

    /// How much of each new estimate replaces the current one (default 0.2, as the anchor's
    /// `smoothing`; 1 replaces it entirely). Must lie in (0, 1].
    pub fn smoothing(mut self, smoothing: f64) -> Self {
        self.smoothing = smoothing;
        self
    }

    /// How much the estimate may grow per sample while latency stays low (default 4, as the
    /// anchor's `queueSize`). Any value is valid; 0 lets the limit only shrink.
    pub fn queue_size(mut self, queue_size: u32) -> Self {
        self.queue_size = queue_size;
        self
    }

    /// The number of samples the long-term average spans (default 600, as the anchor's
    /// `longWindow`): after the first 10 samples, each new one weighs `2 / (long_window + 1)`.
    /// Must be at least 1.
    pub fn long_window(mut self, samples: u32) -> Self {
        self.long_window = samples;
        self
    }

    /// How much slower than the long-term average a run may be before the limit shrinks
    /// (default 1.5, as the anchor's `rttTolerance`: 2.0 accepts twice the average). Must be at
    /// least 1, as the anchor requires, and finite.
    pub fn rtt_tolerance(mut self, tolerance: f64) -> Self {
        self.rtt_tolerance = tolerance;
        self
    }

    /// The [`Gradient2`], or the first parameter that is out of range.
    ///
    /// # Errors
    ///
    /// A [`LimitError`] naming the parameter: `min_limit` of 0, `max_limit` below `min_limit`,
    /// `initial_limit` outside them, `smoothing` outside (0, 1], a `long_window` of 0, or an
    /// `rtt_tolerance` below 1 or not finite.
    pub fn build(self) -> Result<Gradient2, LimitError> {
        self.bounds.check(NAME)?;
        check_smoothing(NAME, self.smoothing)?;
        if self.long_window == 0 {
            return Err(LimitError::new(
                NAME,
                "long_window",
                "must be at least 1 sample".to_string(),
            ));
        }
        if !(self.rtt_tolerance >= 1.0 && self.rtt_tolerance.is_finite()) {
            return Err(LimitError::new(
                NAME,
                "rtt_tolerance",
                format!(
                    "must be a finite number of at least 1 (it is {})",
                    self.rtt_tolerance
                ),
            ));
        }
        Ok(Gradient2::from_valid(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn defaults_are_the_anchors_except_the_minimum() {
        let g = Gradient2::default();
        assert_eq!(g.limit(), 20);
        assert_eq!((g.bounds.min, g.bounds.max), (1, 200));
        assert_eq!(g.smoothing, 0.2);
        assert_eq!(g.queue_size, 4);
        assert_eq!(g.rtt_tolerance, 1.5);
        assert_eq!(g.long_rtt.factor, 2.0 / 601.0);
    }

    #[test]
    fn steady_latency_grows_by_the_smoothed_queue_allowance() {
        let mut g = Gradient2::default();
        // long = 10 ms = rtt: gradient min(1, 1.5) = 1; new = 20 + 4 = 24;
        // 20 × 0.8 + 24 × 0.2 = 20.8.
        assert_eq!(g.on_sample(Sample::new(ms(10), 10, false)), 20);
        assert_eq!(g.estimate, 20.8);
        // 20.8 × 0.8 + 24.8 × 0.2 = 16.64 + 4.96 = 21.6 (in f64: 21.6 within 1e-12).
        assert_eq!(g.on_sample(Sample::new(ms(10), 11, false)), 21);
        assert!((g.estimate - 21.6).abs() < 1e-12);
    }

    /// Step 2's bound is exclusive, as the anchor's `longRtt / shortRtt > 2`: a long-term
    /// average exactly twice the run time is kept, just above it is cut by 5 %.
    #[test]
    fn the_long_average_recovers_only_above_twice_the_run_time() {
        // Factor 2 / (3 + 1) = 0.5 after the 10 warm-up samples of 30 ms (long = 30 ms).
        let mut g = Gradient2::builder().long_window(3).build().unwrap();
        for _ in 0..WARMUP_SAMPLES {
            g.on_sample(Sample::new(ms(30), 20, false));
        }
        assert_eq!(g.long_rtt(), ms(30));
        // long = 0.5 × 30 + 0.5 × 10 = 20 ms, exactly twice 10 ms: kept.
        g.on_sample(Sample::new(ms(10), 20, false));
        assert_eq!(g.long_rtt(), ms(20));
        // long = 0.5 × 20 + 0.5 × 6 = 13 ms, above twice 6 ms: 13 × 0.95 = 12.35 ms.
        g.on_sample(Sample::new(ms(6), 20, false));
        assert_eq!(g.long_rtt(), Duration::from_micros(12_350));
    }

    /// Limit 100, smoothing 1, no queue allowance, after one sample of 10 ms (long = 10 ms:
    /// gradient 1; 100 × 1 + 0 = 100).
    fn at_100_after_10ms() -> Gradient2 {
        let mut g = Gradient2::builder()
            .initial_limit(100)
            .smoothing(1.0)
            .queue_size(0)
            .build()
            .unwrap();
        assert_eq!(g.on_sample(Sample::new(ms(10), 50, false)), 100);
        g
    }

    #[test]
    fn slow_runs_shrink_the_limit_by_at_most_half() {
        let mut g = at_100_after_10ms();
        // long = (10 + 20) / 2 = 15 ms; gradient = 1.5 × 15 / 20 = 1.125 → 1: unchanged.
        assert_eq!(g.on_sample(Sample::new(ms(20), 50, false)), 100);
        // long = (10 + 20 + 90) / 3 = 40 ms; gradient = 1.5 × 40 / 90 = 2/3 → 66.66…
        assert_eq!(g.on_sample(Sample::new(ms(90), 50, false)), 66);
        // long = (120 + 1480) / 4 = 400 ms; gradient = 1.5 × 400 / 1480 = 0.405… → 0.5.
        assert_eq!(g.on_sample(Sample::new(ms(1480), 40, false)), 33);
    }

    #[test]
    fn a_drop_backs_off_by_a_tenth_and_skips_the_average() {
        let mut g = at_100_after_10ms();
        // A drop, whatever its run time and in-flight count: 100 × 0.9 = 90; 1 s is not
        // averaged (long stays 10 ms).
        assert_eq!(g.on_sample(Sample::new(ms(1000), 1, true)), 90);
        assert_eq!(g.long_rtt(), ms(10));
        // A drop answered at once: 90 × 0.9 = 81.
        assert_eq!(g.on_sample(Sample::new(Duration::ZERO, 1, true)), 81);
        // Down to the minimum at most.
        for _ in 0..100 {
            g.on_sample(Sample::new(Duration::ZERO, 1, true));
        }
        assert_eq!(g.limit(), 1);
    }

    #[test]
    fn an_unused_limit_does_not_move_but_the_average_still_learns() {
        let mut g = Gradient2::builder().smoothing(1.0).build().unwrap();
        // 9 < 20 / 2: unchanged; the average is 10 ms all the same.
        assert_eq!(g.on_sample(Sample::new(ms(10), 9, false)), 20);
        assert_eq!(g.long_rtt(), ms(10));
        // 10 is not below 20 / 2: long = 15 ms, gradient = min(1, 1.5 × 15 / 20) = 1: 24.
        assert_eq!(g.on_sample(Sample::new(ms(20), 10, false)), 24);
        // A zero run time that is not a drop changes nothing.
        assert_eq!(g.on_sample(Sample::new(Duration::ZERO, 24, false)), 24);
        assert_eq!(g.long_rtt(), ms(15));
    }

    #[test]
    fn the_average_is_a_mean_of_ten_then_exponential_and_recovers_faster() {
        let mut g = Gradient2::builder().long_window(3).build().unwrap();
        for _ in 0..10 {
            g.on_sample(Sample::new(ms(100), 0, false));
        }
        assert_eq!(g.long_rtt(), ms(100));
        // factor 2 / (3 + 1) = 0.5: long = 100 × 0.5 + 50 × 0.5 = 75 ms (75 / 50 ≤ 2).
        g.on_sample(Sample::new(ms(50), 0, false));
        assert_eq!(g.long_rtt(), ms(75));
        // long = 75 × 0.5 + 10 × 0.5 = 42.5 ms; 42.5 / 10 > 2: stored as 42.5 × 0.95 = 40.375 ms.
        g.on_sample(Sample::new(ms(10), 0, false));
        assert_eq!(g.long_rtt(), Duration::from_micros(40_375));
    }

    #[test]
    fn clamps_to_the_minimum_and_the_maximum() {
        let mut g = Gradient2::builder()
            .initial_limit(10)
            .max_limit(12)
            .smoothing(1.0)
            .build()
            .unwrap();
        // 10 × 1 + 4 = 14 → 12.
        assert_eq!(g.on_sample(Sample::new(ms(10), 10, false)), 12);
        let mut g = Gradient2::builder()
            .min_limit(5)
            .initial_limit(6)
            .queue_size(0)
            .smoothing(1.0)
            .build()
            .unwrap();
        assert_eq!(g.on_sample(Sample::new(ms(10), 6, false)), 6);
        // long = (10 + 10 000) / 2 = 5005 ms; gradient = 1.5 × 5005 / 10 000 = 0.75075;
        // 6 × 0.75075 = 4.5045 → 5.
        assert_eq!(g.on_sample(Sample::new(ms(10_000), 6, false)), 5);
    }

    #[test]
    fn refuses_invalid_parameters() {
        let err = |b: Gradient2Builder| b.build().unwrap_err();
        assert_eq!(
            err(Gradient2::builder().smoothing(0.0)).to_string(),
            "invalid Gradient2 parameter `smoothing`: 0 is outside (0, 1]: 0 would never move \
             the limit, above 1 overshoots"
        );
        assert_eq!(
            err(Gradient2::builder().smoothing(1.5)).parameter(),
            "smoothing"
        );
        assert_eq!(
            err(Gradient2::builder().smoothing(f64::NAN)).parameter(),
            "smoothing"
        );
        assert_eq!(
            err(Gradient2::builder().long_window(0)).parameter(),
            "long_window"
        );
        let e = err(Gradient2::builder().rtt_tolerance(0.9));
        assert_eq!(
            (e.algorithm(), e.parameter()),
            ("Gradient2", "rtt_tolerance")
        );
        assert_eq!(
            err(Gradient2::builder().rtt_tolerance(f64::INFINITY)).parameter(),
            "rtt_tolerance"
        );
        assert_eq!(
            err(Gradient2::builder().min_limit(0)).parameter(),
            "min_limit"
        );
        assert_eq!(
            err(Gradient2::builder().initial_limit(201)).parameter(),
            "initial_limit"
        );
        assert!(
            Gradient2::builder()
                .rtt_tolerance(1.0)
                .smoothing(1.0)
                .build()
                .is_ok()
        );
    }
}
