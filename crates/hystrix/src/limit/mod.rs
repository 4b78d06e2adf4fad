//! Adaptive concurrency-limit algorithms: samples in, limit out.
//!
//! Each algorithm is a small pure value behind one trait, [`LimitAlgorithm`]: it is fed one
//! [`Sample`] per completed execution (its run time, how many executions were in flight when it
//! started, and whether it was a drop) and answers with the new concurrency limit. Nothing here
//! reads a clock, draws a random number or shares state between threads: time enters only
//! through the samples, so a sequence of samples always yields the same sequence of limits.
//!
//! The algorithms follow Netflix's concurrency-limits library (Java,
//! `com.netflix.concurrency.limits.limit`), whose update rules and defaults each type documents:
//!
//! - [`Aimd`]: loss based, additive increase and multiplicative decrease on drops (`AIMDLimit`).
//! - [`Vegas`]: delay based, a queue estimate from the minimum run time, as TCP Vegas
//!   (`VegasLimit`).
//! - [`Gradient2`]: delay based, the ratio of a long-term average run time to the latest one,
//!   with a tolerance and smoothing (`Gradient2Limit`).
//! - [`Windowed`]: any of them fed one sample per window of samples (mean run time, largest
//!   in-flight count, any drop), as `WindowedLimit`.
//!
//! One deliberate difference from the anchor applies to every algorithm here: the minimum limit
//! defaults to 1 (Netflix's default of 20 could not follow a dependency whose capacity is below
//! 20), and it may not be 0 (a limit of 0 admits nothing, so no sample could ever raise it
//! again).
//!
//! Parameters are set on a builder; an invalid one is refused by `build` with a [`LimitError`]
//! naming it, never by a panic.
//!
//! ```
//! use hystrix::limit::{Aimd, LimitAlgorithm, Sample};
//! use std::time::Duration;
//!
//! let mut limit = Aimd::builder().initial_limit(10).build()?;
//! // 6 in flight of a limit of 10 (at least half): one more is allowed.
//! assert_eq!(limit.on_sample(Sample::new(Duration::from_millis(20), 6, false)), 11);
//! // A drop (a timeout, an overload error): the limit shrinks by the backoff ratio 0.9.
//! assert_eq!(limit.on_sample(Sample::new(Duration::from_millis(20), 6, true)), 9);
//! assert_eq!(limit.limit(), 9);
//! # Ok::<(), hystrix::limit::LimitError>(())
//! ```

use std::time::Duration;

/// The builder methods of the [`Bounds`] every algorithm has: `initial_limit`, `min_limit`
/// and `max_limit`, documented with the algorithm's defaults (`min` and `max` complete
/// "default 1" and "default" in their docs).
macro_rules! bounds_setters {
    (min: $min_doc:literal, max: $max_doc:literal) => {
        /// The limit before any sample (default 20, as the anchor). Must lie within
        /// `[min_limit, max_limit]`.
        pub fn initial_limit(mut self, limit: u32) -> Self {
            self.bounds.initial = limit;
            self
        }

        #[doc = concat!("The lowest limit (default 1", $min_doc, "). Must be at least 1.")]
        pub fn min_limit(mut self, limit: u32) -> Self {
            self.bounds.min = limit;
            self
        }

        #[doc = concat!(
                    "The highest limit (default ", $max_doc, "). Must be at least `min_limit`."
                )]
        pub fn max_limit(mut self, limit: u32) -> Self {
            self.bounds.max = limit;
            self
        }
    };
}

mod aimd;
mod gradient2;
mod vegas;
mod windowed;

pub use aimd::{Aimd, AimdBuilder};
pub use gradient2::{Gradient2, Gradient2Builder};
pub use vegas::{Vegas, VegasBuilder};
pub use windowed::Windowed;

/// What one admitted execution tells a [`LimitAlgorithm`] when it completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// How long the execution ran, from its start to its completion (not time spent waiting to
    /// be admitted). The algorithms read it at nanosecond resolution.
    pub rtt: Duration,
    /// How many executions were in flight when this one started, itself included.
    pub in_flight: u32,
    /// Whether the execution was a drop: it timed out, or its error said the dependency is
    /// overloaded.
    pub dropped: bool,
}

impl Sample {
    /// A sample of an execution that ran for `rtt`, started with `in_flight` executions in
    /// flight (itself included), and was a drop if `dropped`.
    #[must_use]
    pub const fn new(rtt: Duration, in_flight: u32, dropped: bool) -> Self {
        Self {
            rtt,
            in_flight,
            dropped,
        }
    }
}

/// A concurrency-limit algorithm: fed one [`Sample`] per completed execution, it keeps the
/// number of executions that may be in flight at once.
///
/// Implementations are pure: the limit depends only on the parameters and the samples given,
/// in order. The limit always lies within the algorithm's minimum and maximum limits.
pub trait LimitAlgorithm {
    /// Takes one sample into account and returns the new limit (also returned by
    /// [`limit`](LimitAlgorithm::limit) from now on).
    fn on_sample(&mut self, sample: Sample) -> u32;

    /// The current limit: how many executions may be in flight at once.
    fn limit(&self) -> u32;
}

/// A parameter of a limit algorithm that was refused by its builder's `build`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {algorithm} parameter `{parameter}`: {reason}")]
pub struct LimitError {
    algorithm: &'static str,
    parameter: &'static str,
    reason: String,
}

impl LimitError {
    fn new(algorithm: &'static str, parameter: &'static str, reason: String) -> Self {
        Self {
            algorithm,
            parameter,
            reason,
        }
    }

    /// The algorithm whose builder refused the parameter: `"AIMD"`, `"Vegas"`, `"Gradient2"`
    /// or `"Windowed"`.
    #[must_use]
    pub fn algorithm(&self) -> &'static str {
        self.algorithm
    }

    /// The refused parameter, named as its builder method (e.g. `"backoff_ratio"`).
    #[must_use]
    pub fn parameter(&self) -> &'static str {
        self.parameter
    }

    /// Why it was refused, with the value given.
    #[must_use]
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// Which algorithm a command's adaptive concurrency limit uses
/// (`execution.isolation.adaptive.algorithm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum AdaptiveAlgorithm {
    /// `AIMD`: [`Aimd`], loss based (grows while busy, shrinks on drops).
    Aimd,
    /// `VEGAS`: [`Vegas`], delay based, a queue estimate from the minimum run time.
    Vegas,
    /// `GRADIENT2`: [`Gradient2`], delay based, long-term against latest run time. The default.
    #[default]
    Gradient2,
}

impl AdaptiveAlgorithm {
    /// The property's word: `AIMD`, `VEGAS` or `GRADIENT2`.
    pub const fn name(self) -> &'static str {
        match self {
            AdaptiveAlgorithm::Aimd => "AIMD",
            AdaptiveAlgorithm::Vegas => "VEGAS",
            AdaptiveAlgorithm::Gradient2 => "GRADIENT2",
        }
    }
}

impl std::fmt::Display for AdaptiveAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl crate::config::PropertyType for AdaptiveAlgorithm {
    fn parse(value: &crate::config::PropertyValue) -> Result<Self, String> {
        const EXPECTED: &str = "expected AIMD, VEGAS or GRADIENT2";
        let crate::config::PropertyValue::Str(word) = value else {
            return Err(EXPECTED.into());
        };
        match word.trim().to_ascii_uppercase().as_str() {
            "AIMD" => Ok(AdaptiveAlgorithm::Aimd),
            "VEGAS" => Ok(AdaptiveAlgorithm::Vegas),
            "GRADIENT2" => Ok(AdaptiveAlgorithm::Gradient2),
            _ => Err(EXPECTED.into()),
        }
    }

    fn to_value(&self) -> Option<crate::config::PropertyValue> {
        Some(crate::config::PropertyValue::Str(self.name().to_owned()))
    }
}

/// One of the algorithms, as a command's limiter holds it (no boxing, no dynamic dispatch).
#[derive(Debug, Clone)]
pub(crate) enum Algorithm {
    Aimd(Aimd),
    Vegas(Vegas),
    Gradient2(Gradient2),
}

impl Algorithm {
    /// The algorithm of [`from_properties`](Algorithm::from_properties) fed one sample per
    /// window of `execution.isolation.adaptive.windowSize` samples.
    pub(crate) fn windowed_from_properties(
        props: &crate::config::CommandProperties,
        kind: AdaptiveAlgorithm,
        initial: Option<u32>,
    ) -> Result<Windowed<Self>, LimitError> {
        Windowed::new(
            Self::from_properties(props, kind, initial)?,
            props.execution_isolation_adaptive_window_size,
        )
    }

    /// The algorithm `execution.isolation.adaptive.*` of `props` describe, starting at
    /// `initial` (clamped into its bounds) when given, else at `initialLimit`.
    pub(crate) fn from_properties(
        props: &crate::config::CommandProperties,
        kind: AdaptiveAlgorithm,
        initial: Option<u32>,
    ) -> Result<Self, LimitError> {
        let min = props.execution_isolation_adaptive_min_limit;
        let max = props.execution_isolation_adaptive_max_limit;
        let initial = initial.map_or(props.execution_isolation_adaptive_initial_limit, |limit| {
            limit.clamp(min.max(1), max.max(min.max(1)))
        });
        Ok(match kind {
            AdaptiveAlgorithm::Aimd => Algorithm::Aimd(
                Aimd::builder()
                    .min_limit(min)
                    .max_limit(max)
                    .initial_limit(initial)
                    .backoff_ratio(props.execution_isolation_adaptive_aimd_backoff_ratio)
                    .timeout(Duration::from_millis(
                        props.execution_isolation_adaptive_aimd_timeout_in_milliseconds,
                    ))
                    .build()?,
            ),
            AdaptiveAlgorithm::Vegas => Algorithm::Vegas(
                Vegas::builder()
                    .min_limit(min)
                    .max_limit(max)
                    .initial_limit(initial)
                    .smoothing(props.execution_isolation_adaptive_vegas_smoothing)
                    .probe_multiplier(props.execution_isolation_adaptive_vegas_probe_multiplier)
                    .build()?,
            ),
            AdaptiveAlgorithm::Gradient2 => Algorithm::Gradient2(
                Gradient2::builder()
                    .min_limit(min)
                    .max_limit(max)
                    .initial_limit(initial)
                    .smoothing(props.execution_isolation_adaptive_gradient2_smoothing)
                    .rtt_tolerance(props.execution_isolation_adaptive_gradient2_rtt_tolerance)
                    .long_window(props.execution_isolation_adaptive_gradient2_long_window)
                    .queue_size(props.execution_isolation_adaptive_gradient2_queue_size)
                    .build()?,
            ),
        })
    }
}

impl LimitAlgorithm for Algorithm {
    #[inline]
    fn on_sample(&mut self, sample: Sample) -> u32 {
        match self {
            Algorithm::Aimd(a) => a.on_sample(sample),
            Algorithm::Vegas(a) => a.on_sample(sample),
            Algorithm::Gradient2(a) => a.on_sample(sample),
        }
    }

    #[inline]
    fn limit(&self) -> u32 {
        match self {
            Algorithm::Aimd(a) => a.limit(),
            Algorithm::Vegas(a) => a.limit(),
            Algorithm::Gradient2(a) => a.limit(),
        }
    }
}

/// Checks the `execution.isolation.adaptive.*` properties of `props` by building each
/// algorithm from them; a refusal comes back as the property's name (after the key's prefix)
/// and the reason.
pub(crate) fn check_properties(
    props: &crate::config::CommandProperties,
) -> Result<(), (&'static str, String)> {
    for kind in [
        AdaptiveAlgorithm::Aimd,
        AdaptiveAlgorithm::Vegas,
        AdaptiveAlgorithm::Gradient2,
    ] {
        if let Err(err) = Algorithm::windowed_from_properties(props, kind, None) {
            let name = match (kind, err.parameter()) {
                (_, "min_limit") => "execution.isolation.adaptive.minLimit",
                (_, "max_limit") => "execution.isolation.adaptive.maxLimit",
                (_, "initial_limit") => "execution.isolation.adaptive.initialLimit",
                (_, "backoff_ratio") => "execution.isolation.adaptive.aimd.backoffRatio",
                (_, "timeout") => "execution.isolation.adaptive.aimd.timeoutInMilliseconds",
                (AdaptiveAlgorithm::Vegas, "smoothing") => {
                    "execution.isolation.adaptive.vegas.smoothing"
                }
                (_, "probe_multiplier") => "execution.isolation.adaptive.vegas.probeMultiplier",
                (_, "smoothing") => "execution.isolation.adaptive.gradient2.smoothing",
                (_, "rtt_tolerance") => "execution.isolation.adaptive.gradient2.rttTolerance",
                (_, "long_window") => "execution.isolation.adaptive.gradient2.longWindow",
                (_, "queue_size") => "execution.isolation.adaptive.gradient2.queueSize",
                (_, "window_size") => "execution.isolation.adaptive.windowSize",
                (_, other) => {
                    return Err((
                        "execution.isolation.adaptive.algorithm",
                        format!("{} parameter {other}: {}", err.algorithm(), err.reason()),
                    ));
                }
            };
            let reason = err.reason().replace("min_limit", "minLimit");
            let reason = reason.replace("max_limit", "maxLimit");
            return Err((name, reason));
        }
    }
    Ok(())
}

/// The minimum, maximum and initial limit every algorithm has, checked together.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    min: u32,
    max: u32,
    initial: u32,
}

impl Bounds {
    /// The defaults all three algorithms share (minimum 1, initial 20) with `max`.
    const fn with_max(max: u32) -> Self {
        Self {
            min: 1,
            max,
            initial: 20,
        }
    }

    fn check(self, algorithm: &'static str) -> Result<Self, LimitError> {
        if self.min == 0 {
            return Err(LimitError::new(
                algorithm,
                "min_limit",
                "must be at least 1: a limit of 0 admits nothing, so no sample could raise it"
                    .to_string(),
            ));
        }
        if self.max < self.min {
            return Err(LimitError::new(
                algorithm,
                "max_limit",
                format!(
                    "must be at least min_limit {} (it is {})",
                    self.min, self.max
                ),
            ));
        }
        if self.initial < self.min || self.initial > self.max {
            return Err(LimitError::new(
                algorithm,
                "initial_limit",
                format!(
                    "must be within [min_limit, max_limit] = [{}, {}] (it is {}{})",
                    self.min,
                    self.max,
                    self.initial,
                    if self.initial == Bounds::with_max(0).initial {
                        ", the default: set it with bounds that leave out 20"
                    } else {
                        ""
                    }
                ),
            ));
        }
        Ok(self)
    }

    /// `limit` clamped to `[min, max]`, as `f64` (for the algorithms that keep a fractional
    /// estimate).
    fn clamp_f64(self, limit: f64) -> f64 {
        limit.clamp(f64::from(self.min), f64::from(self.max))
    }
}

/// Smoothing factors must lie in (0, 1]: 0 would freeze the limit, above 1 would overshoot.
fn check_smoothing(algorithm: &'static str, smoothing: f64) -> Result<(), LimitError> {
    if smoothing > 0.0 && smoothing <= 1.0 {
        Ok(())
    } else {
        Err(LimitError::new(
            algorithm,
            "smoothing",
            format!(
                "{smoothing} is outside (0, 1]: 0 would never move the limit, above 1 overshoots"
            ),
        ))
    }
}

/// A run time in nanoseconds as `f64` (exact below 2^53 ns, about 104 days).
fn nanos(rtt: Duration) -> f64 {
    rtt.as_nanos() as f64
}

/// The floor of an estimated limit as the limit handed out (estimates are clamped to
/// `[min, max]` first, so the cast neither saturates nor sees a NaN).
fn floor_limit(estimate: f64) -> u32 {
    estimate as u32
}

#[cfg(test)]
mod tests {
    use super::AdaptiveAlgorithm;
    use crate::config::{PropertyType, PropertyValue};

    /// `execution.isolation.adaptive.algorithm`'s words: what a user writes, what the
    /// configuration shows back (`to_value`) and what messages print (`Display`).
    #[test]
    fn each_algorithm_reads_and_prints_as_its_property_word() {
        for (algorithm, word) in [
            (AdaptiveAlgorithm::Aimd, "AIMD"),
            (AdaptiveAlgorithm::Vegas, "VEGAS"),
            (AdaptiveAlgorithm::Gradient2, "GRADIENT2"),
        ] {
            assert_eq!(algorithm.name(), word);
            assert_eq!(algorithm.to_string(), word);
            assert_eq!(algorithm.to_value(), Some(PropertyValue::Str(word.into())));
            let written = PropertyValue::Str(format!(" {} ", word.to_lowercase()));
            assert_eq!(AdaptiveAlgorithm::parse(&written), Ok(algorithm));
        }
        assert_eq!(
            AdaptiveAlgorithm::parse(&PropertyValue::Str("CUBIC".into())),
            Err("expected AIMD, VEGAS or GRADIENT2".into())
        );
    }
}
