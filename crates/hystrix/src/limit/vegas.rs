//! [`Vegas`]: a queue estimate from the minimum run time, as TCP Vegas.

use std::time::Duration;

use super::{Bounds, LimitAlgorithm, LimitError, Sample, check_smoothing, floor_limit, nanos};

const NAME: &str = "Vegas";

/// Where in the anchor's random probe interval, `[0.5, 1) × probe_multiplier × limit` samples,
/// this deterministic version probes: the interval's mean.
const PROBE_FACTOR: f64 = 0.75;

/// A delay-based limit, as Netflix concurrency-limits' `VegasLimit` (after TCP Vegas): the
/// fastest run time seen stands for the unloaded latency, and how much slower a run is tells how
/// many executions were queued: `queue = ceil(estimate × (1 − rtt_noload / rtt))`.
///
/// The limit is kept as a fractional estimate; [`limit`](LimitAlgorithm::limit) is its floor.
/// With `log(l) = max(1, floor(log10(l)))` of the limit `l` (the anchor's `Log10RootIntFunction`),
/// `alpha = 3 × log(l)` and `beta = 6 × log(l)` unless fixed on the builder, and
/// `threshold = log(l)`, a **drop** (whatever its run time, zero included) sets
/// `new = estimate − log(l)` and nothing else: its run time is never taken as `rtt_noload` nor
/// counted towards a probe (a refusal answers at once, a timeout is cut at the timeout: neither
/// is the dependency's latency). Every other sample with a run time `rtt` above zero (a zero run
/// time carries no latency information and is ignored; the anchor refuses it) goes through:
///
/// 1. **probe**: every `0.75 × probe_multiplier × estimate` samples, `rtt_noload` is reset to
///    this sample's `rtt` (so that it can rise again when the dependency has become slower for
///    good), and nothing else changes;
/// 2. **new minimum**: on the first sample, or when `rtt < rtt_noload`, `rtt_noload` becomes
///    `rtt`, and nothing else changes;
/// 3. if `in_flight × 2 < estimate` (the caller does not use its limit): unchanged;
/// 4. otherwise, by `queue`: `≤ threshold`: `new = estimate + beta` (no queueing: grow fast);
///    `< alpha`: `new = estimate + log(l)`; `> beta`: `new = estimate − log(l)`; else (within
///    `[alpha, beta]`) unchanged;
///
/// then `new` is clamped to `[min_limit, max_limit]` and
/// `estimate ← (1 − smoothing) × estimate + smoothing × new`.
///
/// Differences from the anchor: it passes a drop through the probe and minimum steps first (a
/// drop answered at once became the unloaded run time there and was never decreased; one of
/// zero run time was refused); here a drop always decreases. It draws its probe interval at random from `[0.5, 1)` times
/// `probe_multiplier × estimate`; this type is pure and uses the mean, 0.75 (instances that
/// should not probe in step can be given different `probe_multiplier`s). It clamps to `[1, max]`;
/// this type to `[min_limit, max_limit]` (the default minimum of 1 is the anchor's). Its alpha,
/// beta, threshold, increase and decrease may be arbitrary functions of the limit; here alpha and
/// beta may be fixed numbers and the rest are the anchor's defaults.
///
/// Defaults, as the anchor's: initial limit 20, minimum 1, maximum 1000 (`maxConcurrency`),
/// smoothing 1.0, probe multiplier 30, alpha `3 × log(l)`, beta `6 × log(l)`.
///
/// ```
/// use hystrix::limit::{LimitAlgorithm, Sample, Vegas};
/// use std::time::Duration;
///
/// let mut vegas = Vegas::default();
/// let ms = |n| Duration::from_millis(n);
/// // The first sample only sets the unloaded run time, 10 ms.
/// assert_eq!(vegas.on_sample(Sample::new(ms(10), 10, false)), 20);
/// // No queueing (queue = 0 ≤ threshold 1): + beta = 6.
/// assert_eq!(vegas.on_sample(Sample::new(ms(10), 10, false)), 26);
/// // Twice as slow: queue = ceil(26 × 0.5) = 13 > beta 6: − 1.
/// assert_eq!(vegas.on_sample(Sample::new(ms(20), 13, false)), 25);
/// assert_eq!(vegas.rtt_noload(), Some(ms(10)));
/// ```
#[derive(Debug, Clone)]
pub struct Vegas {
    estimate: f64,
    bounds: Bounds,
    smoothing: f64,
    alpha: Option<u32>,
    beta: Option<u32>,
    probe_multiplier: u32,
    probe_count: u64,
    rtt_noload: Option<Duration>,
}

impl Vegas {
    /// A builder with the defaults (see [`Vegas`]).
    pub fn builder() -> VegasBuilder {
        VegasBuilder::default()
    }

    /// The run time taken as unloaded: the fastest since the last probe (`None` before the
    /// first sample).
    #[must_use]
    pub fn rtt_noload(&self) -> Option<Duration> {
        self.rtt_noload
    }

    fn from_valid(b: VegasBuilder) -> Self {
        Self {
            estimate: f64::from(b.bounds.initial),
            bounds: b.bounds,
            smoothing: b.smoothing,
            alpha: b.alpha,
            beta: b.beta,
            probe_multiplier: b.probe_multiplier,
            probe_count: 0,
            rtt_noload: None,
        }
    }

    fn update(&mut self, sample: Sample, rtt_noload: Duration) -> u32 {
        let l = floor_limit(self.estimate);
        let log = log10_root(l);
        let new = if f64::from(sample.in_flight) * 2.0 < self.estimate {
            return l;
        } else {
            let queue = (self.estimate * (1.0 - nanos(rtt_noload) / nanos(sample.rtt))).ceil();
            let alpha = f64::from(self.alpha.unwrap_or(3 * log));
            let beta = f64::from(self.beta.unwrap_or(6 * log));
            if queue <= f64::from(log) {
                self.estimate + beta
            } else if queue < alpha {
                self.estimate + f64::from(log)
            } else if queue > beta {
                self.estimate - f64::from(log)
            } else {
                return l;
            }
        };
        self.smooth_to(new)
    }

    /// A drop: `new = estimate − log(l)`, whatever the run time and the in-flight count.
    fn decrease(&mut self) -> u32 {
        let log = log10_root(floor_limit(self.estimate));
        self.smooth_to(self.estimate - f64::from(log))
    }

    fn smooth_to(&mut self, new: f64) -> u32 {
        let new = self.bounds.clamp_f64(new);
        self.estimate = (1.0 - self.smoothing) * self.estimate + self.smoothing * new;
        self.limit()
    }
}

impl Default for Vegas {
    /// A `Vegas` with the defaults (see [`Vegas`]).
    fn default() -> Self {
        Self::from_valid(VegasBuilder::default())
    }
}

impl LimitAlgorithm for Vegas {
    fn on_sample(&mut self, sample: Sample) -> u32 {
        if sample.dropped {
            // A drop's run time is cut short (a refusal) or by the timeout: never a latency of
            // the dependency, so never `rtt_noload` nor a probe; it always decreases.
            return self.decrease();
        }
        if sample.rtt.is_zero() {
            return self.limit();
        }
        self.probe_count += 1;
        let probe_after = PROBE_FACTOR * f64::from(self.probe_multiplier) * self.estimate;
        if probe_after <= self.probe_count as f64 {
            self.probe_count = 0;
            self.rtt_noload = Some(sample.rtt);
            return self.limit();
        }
        match self.rtt_noload {
            Some(noload) if sample.rtt >= noload => self.update(sample, noload),
            _ => {
                self.rtt_noload = Some(sample.rtt);
                self.limit()
            }
        }
    }

    fn limit(&self) -> u32 {
        floor_limit(self.estimate)
    }
}

/// `max(1, floor(log10(limit)))`, as the anchor's `Log10RootIntFunction` (1 for 0).
fn log10_root(limit: u32) -> u32 {
    limit.checked_ilog10().unwrap_or(0).max(1)
}

/// The parameters of a [`Vegas`]; [`build`](VegasBuilder::build) checks them.
#[derive(Debug, Clone)]
#[must_use]
pub struct VegasBuilder {
    bounds: Bounds,
    smoothing: f64,
    alpha: Option<u32>,
    beta: Option<u32>,
    probe_multiplier: u32,
}

impl Default for VegasBuilder {
    fn default() -> Self {
        Self {
            bounds: Bounds::with_max(1000),
            smoothing: 1.0,
            alpha: None,
            beta: None,
            probe_multiplier: 30,
        }
    }
}

impl VegasBuilder {
    bounds_setters!(min: ", the anchor's fixed floor", max: "1000, as the anchor's `maxConcurrency`");

    /// How much of each new estimate replaces the current one (default 1.0, as the anchor's
    /// `smoothing`: entirely). Must lie in (0, 1].
    pub fn smoothing(mut self, smoothing: f64) -> Self {
        self.smoothing = smoothing;
        self
    }

    /// A fixed alpha, the queue below which the limit grows by `log(l)` (default `3 × log(l)`,
    /// as the anchor's `alpha`). Must not exceed a fixed beta.
    pub fn alpha(mut self, alpha: u32) -> Self {
        self.alpha = Some(alpha);
        self
    }

    /// A fixed beta, the queue above which the limit shrinks, and the growth when nothing is
    /// queued (default `6 × log(l)`, as the anchor's `beta`). Must not be below a fixed alpha.
    pub fn beta(mut self, beta: u32) -> Self {
        self.beta = Some(beta);
        self
    }

    /// The unloaded run time is probed afresh every `0.75 × probe_multiplier × estimate`
    /// samples (default 30, as the anchor's `probeMultiplier`). Must be at least 1.
    pub fn probe_multiplier(mut self, multiplier: u32) -> Self {
        self.probe_multiplier = multiplier;
        self
    }

    /// The [`Vegas`], or the first parameter that is out of range.
    ///
    /// # Errors
    ///
    /// A [`LimitError`] naming the parameter: `min_limit` of 0, `max_limit` below `min_limit`,
    /// `initial_limit` outside them, `smoothing` outside (0, 1], a `probe_multiplier` of 0
    /// (every sample would be a probe, and the limit would never move), or a fixed `beta` below
    /// a fixed `alpha`.
    pub fn build(self) -> Result<Vegas, LimitError> {
        self.bounds.check(NAME)?;
        check_smoothing(NAME, self.smoothing)?;
        if self.probe_multiplier == 0 {
            return Err(LimitError::new(
                NAME,
                "probe_multiplier",
                "must be at least 1: with 0 every sample is a probe and the limit never moves"
                    .to_string(),
            ));
        }
        if let (Some(alpha), Some(beta)) = (self.alpha, self.beta) {
            if beta < alpha {
                return Err(LimitError::new(
                    NAME,
                    "beta",
                    format!("must be at least alpha {alpha} (it is {beta})"),
                ));
            }
        }
        Ok(Vegas::from_valid(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn ok(rtt: Duration, in_flight: u32) -> Sample {
        Sample::new(rtt, in_flight, false)
    }

    #[test]
    fn defaults_are_the_anchors() {
        let v = Vegas::default();
        assert_eq!(v.limit(), 20);
        assert_eq!((v.bounds.min, v.bounds.max), (1, 1000));
        assert_eq!(v.smoothing, 1.0);
        assert_eq!(v.probe_multiplier, 30);
        assert_eq!((v.alpha, v.beta), (None, None));
        assert_eq!(v.rtt_noload(), None);
    }

    #[test]
    fn log10_root_is_the_anchors() {
        let got: Vec<u32> = [0, 1, 9, 10, 99, 100, 999, 1000, 10_000, u32::MAX]
            .into_iter()
            .map(log10_root)
            .collect();
        assert_eq!(got, [1, 1, 1, 1, 1, 2, 2, 3, 4, 9]);
    }

    #[test]
    fn every_branch_with_the_defaults() {
        let mut v = Vegas::default();
        // First sample: rtt_noload = 10 ms.
        assert_eq!(v.on_sample(ok(ms(10), 10)), 20);
        // queue = ceil(20 × 0) = 0 ≤ threshold 1: 20 + beta 6.
        assert_eq!(v.on_sample(ok(ms(10), 10)), 26);
        // queue = ceil(26 × (1 − 10/20)) = 13 > beta 6: 26 − 1.
        assert_eq!(v.on_sample(ok(ms(20), 13)), 25);
        // queue = ceil(25 × (1 − 10/16)) = ceil(9.375) = 10 > 6: 25 − 1.
        assert_eq!(v.on_sample(ok(ms(16), 13)), 24);
        // queue = ceil(24 × (1 − 10/12.5)) = ceil(4.8) = 5, within [alpha 3, beta 6]: unchanged.
        assert_eq!(v.on_sample(ok(Duration::from_micros(12_500), 12)), 24);
        // queue = ceil(24 × (1 − 10/10.5)) = ceil(1.14…) = 2: above threshold 1, below alpha
        // 3: 24 + 1.
        assert_eq!(v.on_sample(ok(Duration::from_micros(10_500), 12)), 25);
        // A drop: 25 − 1, whatever the in-flight count; its 1 ms run time, below rtt_noload,
        // is not taken as unloaded.
        assert_eq!(v.on_sample(Sample::new(ms(1), 0, true)), 24);
        assert_eq!(v.rtt_noload(), Some(ms(10)));
        // 11 × 2 < 24: the limit is not used, unchanged even without queueing.
        assert_eq!(v.on_sample(ok(ms(10), 11)), 24);
        // A faster run only lowers rtt_noload.
        assert_eq!(v.on_sample(ok(ms(5), 24)), 24);
        assert_eq!(v.rtt_noload(), Some(ms(5)));
        // A zero run time is ignored, unless a drop: a refusal answered at once, 24 − 1.
        assert_eq!(v.on_sample(Sample::new(Duration::ZERO, 24, false)), 24);
        assert_eq!(v.on_sample(Sample::new(Duration::ZERO, 24, true)), 23);
        assert_eq!(v.rtt_noload(), Some(ms(5)));
    }

    #[test]
    fn alpha_beta_and_steps_follow_log10_of_the_limit() {
        let mut v = Vegas::builder().initial_limit(100).build().unwrap();
        v.on_sample(ok(ms(10), 50));
        // log(100) = 2: no queueing, + beta 12.
        assert_eq!(v.on_sample(ok(ms(10), 50)), 112);
        // queue = ceil(112 × 0.5) = 56 > beta 12: − 2.
        assert_eq!(v.on_sample(ok(ms(20), 56)), 110);
        // Fixed alpha 30 and beta 40: queue = ceil(110 × (1 − 10/12.5)) = 22, above threshold 2
        // and below alpha 30: + log 2.
        let mut v = Vegas::builder()
            .initial_limit(110)
            .alpha(30)
            .beta(40)
            .build()
            .unwrap();
        v.on_sample(ok(ms(10), 55));
        assert_eq!(v.on_sample(ok(Duration::from_micros(12_500), 55)), 112);
        // queue = ceil(112 × 0) = 0 ≤ threshold 2: + beta 40.
        assert_eq!(v.on_sample(ok(ms(10), 56)), 152);
    }

    #[test]
    fn alpha_and_beta_grow_with_the_limit_and_their_bounds_change_nothing() {
        let us = Duration::from_micros;
        let mut v = Vegas::builder().initial_limit(100).build().unwrap();
        v.on_sample(ok(ms(10), 50));
        // log(100) = 2, alpha 6, beta 12. queue = ceil(100 × (1 − 10/10.5)) = ceil(4.76…) = 5:
        // above threshold 2, below alpha 6: + log 2.
        assert_eq!(v.on_sample(ok(us(10_500), 50)), 102);
        // queue = ceil(102 × (1 − 10/10.6)) = ceil(5.77…) = 6, alpha itself: unchanged.
        assert_eq!(v.on_sample(ok(us(10_600), 51)), 102);
        // queue = ceil(102 × (1 − 10/11.25)) = ceil(11.33…) = 12, beta itself: unchanged.
        assert_eq!(v.on_sample(ok(us(11_250), 51)), 102);
        // queue = ceil(102 × (1 − 10/11.5)) = 14, above beta: − 2.
        assert_eq!(v.on_sample(ok(us(11_500), 51)), 100);
    }

    #[test]
    fn smoothing_moves_part_of_the_way() {
        let mut v = Vegas::builder().smoothing(0.5).build().unwrap();
        v.on_sample(ok(ms(10), 10));
        // new = 26: 0.5 × 20 + 0.5 × 26 = 23.
        assert_eq!(v.on_sample(ok(ms(10), 10)), 23);
        // new = 29: 0.5 × 23 + 0.5 × 29 = 26.
        assert_eq!(v.on_sample(ok(ms(10), 12)), 26);
    }

    #[test]
    fn clamps_to_the_minimum_and_the_maximum() {
        let mut v = Vegas::builder().max_limit(22).build().unwrap();
        v.on_sample(ok(ms(10), 10));
        assert_eq!(v.on_sample(ok(ms(10), 10)), 22); // 26 → 22
        let mut v = Vegas::builder().min_limit(20).build().unwrap();
        v.on_sample(ok(ms(10), 10));
        assert_eq!(v.on_sample(Sample::new(ms(10), 10, true)), 20); // 19 → 20
        let mut v = Vegas::builder().initial_limit(1).build().unwrap();
        v.on_sample(ok(ms(10), 1));
        assert_eq!(v.on_sample(Sample::new(ms(10), 1, true)), 1); // 0 → 1
    }

    #[test]
    fn probes_the_unloaded_run_time_afresh() {
        let mut v = Vegas::builder()
            .initial_limit(4)
            .probe_multiplier(1)
            .build()
            .unwrap();
        // Sample 1 sets rtt_noload = 10 ms; sample 2: no queueing, 4 + 6 = 10.
        assert_eq!(v.on_sample(ok(ms(10), 4)), 4);
        assert_eq!(v.on_sample(ok(ms(10), 4)), 10);
        // Samples 3 to 7: queue = ceil(10 × 0.5) = 5 within [3, 6]; 0.75 × 1 × 10 = 7.5 > count.
        for _ in 3..=7 {
            assert_eq!(v.on_sample(ok(ms(20), 10)), 10);
        }
        assert_eq!(v.rtt_noload(), Some(ms(10)));
        // Sample 8: 7.5 ≤ 8, a probe: rtt_noload = 20 ms, the limit unchanged.
        assert_eq!(v.on_sample(ok(ms(20), 10)), 10);
        assert_eq!(v.rtt_noload(), Some(ms(20)));
        // Now 20 ms is unloaded: no queueing, 10 + 6.
        assert_eq!(v.on_sample(ok(ms(20), 10)), 16);
    }

    #[test]
    fn refuses_invalid_parameters() {
        let err = |b: VegasBuilder| b.build().unwrap_err();
        assert_eq!(
            err(Vegas::builder().alpha(5).beta(4)).to_string(),
            "invalid Vegas parameter `beta`: must be at least alpha 5 (it is 4)"
        );
        let e = err(Vegas::builder().probe_multiplier(0));
        assert_eq!(
            (e.algorithm(), e.parameter()),
            ("Vegas", "probe_multiplier")
        );
        assert_eq!(
            err(Vegas::builder().smoothing(0.0)).parameter(),
            "smoothing"
        );
        assert_eq!(
            err(Vegas::builder().smoothing(-1.0)).parameter(),
            "smoothing"
        );
        assert_eq!(err(Vegas::builder().min_limit(0)).parameter(), "min_limit");
        assert_eq!(
            err(Vegas::builder().max_limit(10)).parameter(),
            "initial_limit"
        );
        assert!(Vegas::builder().alpha(4).beta(4).build().is_ok());
    }
}
