//! [`Aimd`]: additive increase, multiplicative decrease on drops.

use std::time::Duration;

use super::{Bounds, LimitAlgorithm, LimitError, Sample};

const NAME: &str = "AIMD";

/// A loss-based limit, as Netflix concurrency-limits' `AIMDLimit`: it grows by one while
/// executions succeed and shrinks by a ratio when one is dropped.
///
/// For each sample, with `limit` the current limit:
///
/// - a drop, or a run time longer than [`timeout`](AimdBuilder::timeout): `limit` becomes
///   `floor(limit × backoff_ratio)`;
/// - otherwise, if `in_flight × 2 ≥ limit` (the limit is being used, at least half of it): `limit`
///   becomes `limit + 1`;
/// - otherwise (the caller does not use its limit, so a success says nothing about a higher one):
///   unchanged;
///
/// then `limit` is clamped to `[min_limit, max_limit]`.
///
/// Defaults, as the anchor's unless marked: initial limit 20, minimum 1 (the anchor's is 20),
/// maximum 200, backoff ratio 0.9, timeout 5 s.
///
/// ```
/// use hystrix::limit::{Aimd, LimitAlgorithm, Sample};
/// use std::time::Duration;
///
/// let mut aimd = Aimd::builder()
///     .initial_limit(4)
///     .max_limit(5)
///     .backoff_ratio(0.5)
///     .timeout(Duration::from_secs(1))
///     .build()?;
/// let ok = |in_flight| Sample::new(Duration::from_millis(10), in_flight, false);
/// assert_eq!(aimd.on_sample(ok(2)), 5); // 2 × 2 ≥ 4: + 1
/// assert_eq!(aimd.on_sample(ok(5)), 5); // clamped to the maximum
/// assert_eq!(aimd.on_sample(Sample::new(Duration::from_secs(2), 5, false)), 2); // > timeout
/// # Ok::<(), hystrix::limit::LimitError>(())
/// ```
#[derive(Debug, Clone)]
pub struct Aimd {
    limit: u32,
    bounds: Bounds,
    backoff_ratio: f64,
    timeout: Duration,
}

impl Aimd {
    /// A builder with the defaults (see [`Aimd`]).
    pub fn builder() -> AimdBuilder {
        AimdBuilder::default()
    }

    fn from_valid(b: AimdBuilder) -> Self {
        Self {
            limit: b.bounds.initial,
            bounds: b.bounds,
            backoff_ratio: b.backoff_ratio,
            timeout: b.timeout,
        }
    }
}

impl Default for Aimd {
    /// An `Aimd` with the defaults (see [`Aimd`]).
    fn default() -> Self {
        Self::from_valid(AimdBuilder::default())
    }
}

impl LimitAlgorithm for Aimd {
    fn on_sample(&mut self, sample: Sample) -> u32 {
        let limit = if sample.dropped || sample.rtt > self.timeout {
            // The ratio lies in [0.5, 1): the product is a non-negative f64 below u32::MAX.
            (f64::from(self.limit) * self.backoff_ratio) as u32
        } else if u64::from(sample.in_flight) * 2 >= u64::from(self.limit) {
            self.limit.saturating_add(1)
        } else {
            self.limit
        };
        self.limit = limit.clamp(self.bounds.min, self.bounds.max);
        self.limit
    }

    fn limit(&self) -> u32 {
        self.limit
    }
}

/// The parameters of an [`Aimd`]; [`build`](AimdBuilder::build) checks them.
#[derive(Debug, Clone)]
#[must_use]
pub struct AimdBuilder {
    bounds: Bounds,
    backoff_ratio: f64,
    timeout: Duration,
}

impl Default for AimdBuilder {
    fn default() -> Self {
        Self {
            bounds: Bounds::with_max(200),
            backoff_ratio: 0.9,
            timeout: Duration::from_secs(5),
        }
    }
}

impl AimdBuilder {
    bounds_setters!(min: "; the anchor's is 20", max: "200, as the anchor");

    /// The factor applied to the limit on a drop (default 0.9, as the anchor's `backoffRatio`).
    /// Must lie in [0.5, 1), as the anchor requires.
    pub fn backoff_ratio(mut self, ratio: f64) -> Self {
        self.backoff_ratio = ratio;
        self
    }

    /// A run time longer than this counts as a drop even when the sample does not say so
    /// (default 5 s, as the anchor's `timeout`). Must be above zero.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The [`Aimd`], or the first parameter that is out of range.
    ///
    /// # Errors
    ///
    /// A [`LimitError`] naming the parameter: `min_limit` of 0, `max_limit` below `min_limit`,
    /// `initial_limit` outside them, `backoff_ratio` outside [0.5, 1), or a zero `timeout`.
    pub fn build(self) -> Result<Aimd, LimitError> {
        self.bounds.check(NAME)?;
        if !(0.5..1.0).contains(&self.backoff_ratio) {
            return Err(LimitError::new(
                NAME,
                "backoff_ratio",
                format!("{} is outside [0.5, 1)", self.backoff_ratio),
            ));
        }
        if self.timeout.is_zero() {
            return Err(LimitError::new(
                NAME,
                "timeout",
                "must be above zero".to_string(),
            ));
        }
        Ok(Aimd::from_valid(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(in_flight: u32) -> Sample {
        Sample::new(Duration::from_millis(10), in_flight, false)
    }

    fn dropped(in_flight: u32) -> Sample {
        Sample::new(Duration::from_millis(10), in_flight, true)
    }

    #[test]
    fn defaults_are_the_anchors_except_the_minimum() {
        let aimd = Aimd::default();
        assert_eq!(aimd.limit(), 20);
        assert_eq!(aimd.bounds.min, 1);
        assert_eq!(aimd.bounds.max, 200);
        assert_eq!(aimd.backoff_ratio, 0.9);
        assert_eq!(aimd.timeout, Duration::from_secs(5));
    }

    #[test]
    fn grows_by_one_while_at_least_half_is_used_and_backs_off_on_drops() {
        let mut aimd = Aimd::default();
        // 10 × 2 ≥ 20: 21; 10 × 2 < 21: unchanged; 11 × 2 ≥ 21: 22.
        assert_eq!(aimd.on_sample(ok(10)), 21);
        assert_eq!(aimd.on_sample(ok(10)), 21);
        assert_eq!(aimd.on_sample(ok(11)), 22);
        // floor(22 × 0.9) = floor(19.8) = 19; floor(19 × 0.9) = floor(17.1) = 17.
        assert_eq!(aimd.on_sample(dropped(22)), 19);
        assert_eq!(aimd.on_sample(dropped(0)), 17);
        // A drop shrinks the limit whatever the in-flight count.
        assert_eq!(aimd.on_sample(dropped(100)), 15);
        assert_eq!(aimd.limit(), 15);
    }

    #[test]
    fn a_run_time_beyond_the_timeout_is_a_drop() {
        let mut aimd = Aimd::builder()
            .timeout(Duration::from_millis(100))
            .build()
            .unwrap();
        // Exactly the timeout is not beyond it: + 1.
        assert_eq!(
            aimd.on_sample(Sample::new(Duration::from_millis(100), 20, false)),
            21
        );
        // floor(21 × 0.9) = floor(18.9) = 18.
        assert_eq!(
            aimd.on_sample(Sample::new(Duration::from_micros(100_001), 20, false)),
            18
        );
    }

    #[test]
    fn clamps_to_the_minimum_and_the_maximum() {
        let mut aimd = Aimd::builder()
            .min_limit(2)
            .initial_limit(3)
            .max_limit(4)
            .backoff_ratio(0.5)
            .build()
            .unwrap();
        assert_eq!(aimd.on_sample(ok(2)), 4);
        assert_eq!(aimd.on_sample(ok(4)), 4); // 5 clamped to 4
        assert_eq!(aimd.on_sample(dropped(4)), 2); // floor(4 × 0.5)
        assert_eq!(aimd.on_sample(dropped(4)), 2); // 1 clamped to 2

        // With the default minimum of 1, floor(1 × 0.9) = 0 is clamped back to 1.
        let mut aimd = Aimd::builder().initial_limit(1).build().unwrap();
        assert_eq!(aimd.on_sample(dropped(1)), 1);
        assert_eq!(aimd.on_sample(ok(1)), 2); // 1 × 2 ≥ 1
    }

    #[test]
    fn refuses_invalid_parameters() {
        let err = |b: AimdBuilder| b.build().unwrap_err();
        let e = err(Aimd::builder().backoff_ratio(1.0));
        assert_eq!((e.algorithm(), e.parameter()), ("AIMD", "backoff_ratio"));
        assert_eq!(
            e.to_string(),
            "invalid AIMD parameter `backoff_ratio`: 1 is outside [0.5, 1)"
        );
        assert_eq!(
            err(Aimd::builder().backoff_ratio(0.49)).parameter(),
            "backoff_ratio"
        );
        assert_eq!(
            err(Aimd::builder().backoff_ratio(f64::NAN)).parameter(),
            "backoff_ratio"
        );
        assert_eq!(
            err(Aimd::builder().timeout(Duration::ZERO)).parameter(),
            "timeout"
        );
        assert_eq!(err(Aimd::builder().min_limit(0)).parameter(), "min_limit");
        assert_eq!(
            err(Aimd::builder().min_limit(30)).to_string(),
            "invalid AIMD parameter `initial_limit`: must be within [min_limit, max_limit] = [30, 200] (it is 20, the default: set it with bounds that leave out 20)"
        );
        assert_eq!(
            err(Aimd::builder().min_limit(10).max_limit(5)).to_string(),
            "invalid AIMD parameter `max_limit`: must be at least min_limit 10 (it is 5)"
        );
        assert_eq!(
            err(Aimd::builder().max_limit(19)).parameter(),
            "initial_limit"
        );
        // The edges of the ranges are accepted.
        assert!(Aimd::builder().backoff_ratio(0.5).build().is_ok());
        assert!(Aimd::builder().min_limit(20).max_limit(20).build().is_ok());
    }
}
