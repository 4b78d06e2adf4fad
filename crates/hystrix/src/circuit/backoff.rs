//! How long an opened breaker stays open: the sleep window, grown on repeated re-opens (the
//! cloud circuit-breaker pattern's open-duration backoff).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::config::ceil_millis;
use crate::error::ConfigError;

/// What opened the breaker, as a [`Backoff::custom`] function sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum OpenTrigger {
    /// The health counts crossed `circuitBreaker.errorThresholdPercentage`.
    Health,
    /// A half-open trial failed.
    TrialFailed,
    /// The classifier said [`Class::TripNow`](crate::command::Class::TripNow).
    TripNow,
    /// The shared state store reported the dependency open. Such an opening lasts what is
    /// left of the shared open period, never a fresh sleep window: the backoff is not asked, so a
    /// [`Backoff::custom`] function never sees this trigger; events and listeners do.
    StateStore,
}

/// What a [`Backoff::custom`] function decides from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpenContext {
    /// Re-opens since the breaker last closed: 0 for the opening from CLOSED, 1 for the first
    /// failed trial after it, and so on.
    pub reopens: u32,
    /// What opened it.
    pub trigger: OpenTrigger,
    /// `circuitBreaker.sleepWindowInMilliseconds` now.
    pub sleep_window: Duration,
}

#[derive(Clone)]
enum Policy {
    Constant,
    Exponential { multiplier: f64, max_ms: u64 },
    Custom(Arc<dyn Fn(OpenContext) -> Duration + Send + Sync>),
}

/// The open-duration policy of a command's breaker, set with
/// [`CommandBuilder::open_backoff`](crate::command::CommandBuilder::open_backoff): applied at
/// each opening; the count of re-opens it sees goes back to 0 when the breaker closes. The
/// duration decided is visible in
/// [`CircuitBreakerHandle::open_duration_ms`](crate::CircuitBreakerHandle::open_duration_ms),
/// [`CommandMetrics::circuit_open_duration_ms`](crate::CommandMetrics::circuit_open_duration_ms)
/// and the [`Opened`](crate::circuit::BreakerEventKind::Opened) event. A
/// [`Class::TripNow`](crate::command::Class::TripNow) minimum (e.g. a Retry-After) is applied on
/// top: the breaker stays open for the larger of the two.
///
/// ```
/// use hystrix::circuit::{Backoff, OpenContext, OpenTrigger};
/// use std::time::Duration;
///
/// // 5 s, then 10 s, 20 s, ... but never more than 60 s.
/// let backoff = Backoff::exponential(2.0, Duration::from_secs(60))?;
/// assert_eq!(backoff.open_duration_ms(5000, 0, OpenTrigger::Health), 5000);
/// assert_eq!(backoff.open_duration_ms(5000, 2, OpenTrigger::TrialFailed), 20_000);
/// assert_eq!(backoff.open_duration_ms(5000, 9, OpenTrigger::TrialFailed), 60_000);
/// # Ok::<(), hystrix::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct Backoff(Policy);

impl Default for Backoff {
    fn default() -> Self {
        Backoff::constant()
    }
}

impl fmt::Debug for Backoff {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Policy::Constant => f.write_str("Backoff::Constant"),
            Policy::Exponential { multiplier, max_ms } => f
                .debug_struct("Backoff::Exponential")
                .field("multiplier", multiplier)
                .field("max_ms", max_ms)
                .finish(),
            Policy::Custom(_) => f.write_str("Backoff::Custom(..)"),
        }
    }
}

impl Backoff {
    /// Hystrix's behaviour and the default: every opening lasts
    /// `circuitBreaker.sleepWindowInMilliseconds` as it is at the time of the check (the
    /// property stays dynamic while open).
    pub fn constant() -> Self {
        Backoff(Policy::Constant)
    }

    /// The sleep window times `multiplier` to the power of the re-opens since the last close,
    /// at most `max` (rounded up to whole ms).
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] naming `circuitBreaker.backoff.multiplier` when
    /// `multiplier` is below 1 or not finite, or `circuitBreaker.backoff.max` when `max` is 0.
    pub fn exponential(multiplier: f64, max: Duration) -> Result<Self, ConfigError> {
        if !multiplier.is_finite() || multiplier < 1.0 {
            return Err(ConfigError::InvalidValue {
                name: "circuitBreaker.backoff.multiplier".into(),
                value: multiplier.to_string(),
                reason: "must be a finite number of at least 1".into(),
            });
        }
        let max_ms = ceil_millis(max);
        if max_ms == 0 {
            return Err(ConfigError::InvalidValue {
                name: "circuitBreaker.backoff.max".into(),
                value: format!("{max:?}"),
                reason: "must be at least 1 ms".into(),
            });
        }
        Ok(Backoff(Policy::Exponential { multiplier, max_ms }))
    }

    /// Your own function of the re-opens, the trigger and the sleep window. It runs when the
    /// breaker opens, on the thread that opened it; a panic inside it is caught and the sleep
    /// window is used.
    pub fn custom(decide: impl Fn(OpenContext) -> Duration + Send + Sync + 'static) -> Self {
        Backoff(Policy::Custom(Arc::new(decide)))
    }

    /// Whether this is [`Backoff::constant`] (the duration then follows the property).
    pub(crate) fn is_constant(&self) -> bool {
        matches!(self.0, Policy::Constant)
    }

    /// Its kind, for telling definitions apart: `None` for the constant default.
    pub(crate) fn kind(&self) -> Option<&'static str> {
        match self.0 {
            Policy::Constant => None,
            Policy::Exponential { .. } => Some("exponential backoff"),
            Policy::Custom(_) => Some("custom backoff"),
        }
    }

    /// The open duration in ms for an opening with `reopens` re-opens since the last close,
    /// given the sleep window `sleep_window_ms`. At least 1 ms.
    pub fn open_duration_ms(
        &self,
        sleep_window_ms: u64,
        reopens: u32,
        trigger: OpenTrigger,
    ) -> u64 {
        match &self.0 {
            Policy::Constant => sleep_window_ms,
            Policy::Exponential { multiplier, max_ms } => {
                let grown = sleep_window_ms as f64 * multiplier.powi(reopens.min(1 << 16) as i32);
                if grown >= *max_ms as f64 {
                    *max_ms
                } else {
                    grown.ceil() as u64
                }
            }
            Policy::Custom(decide) => {
                let context = OpenContext {
                    reopens,
                    trigger,
                    sleep_window: Duration::from_millis(sleep_window_ms),
                };
                match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decide(context))) {
                    Ok(duration) => ceil_millis(duration),
                    Err(panic) => {
                        let message = crate::command::panic_message(panic);
                        tracing::error!(
                            "hystrix: the open-duration backoff function panicked ({message}); \
                             the sleep window is used"
                        );
                        sleep_window_ms
                    }
                }
            }
        }
        .max(1)
    }
}

#[cfg(all(test, not(hystrix_loom)))]
mod tests {
    use super::*;

    #[test]
    fn exponential_grows_from_the_sleep_window_and_stops_at_the_cap() {
        let backoff = Backoff::exponential(2.0, Duration::from_secs(30)).unwrap();
        let sequence: Vec<u64> = (0..6)
            .map(|reopens| backoff.open_duration_ms(5000, reopens, OpenTrigger::TrialFailed))
            .collect();
        assert_eq!(sequence, [5000, 10_000, 20_000, 30_000, 30_000, 30_000]);
        assert_eq!(
            backoff.open_duration_ms(5000, u32::MAX, OpenTrigger::TrialFailed),
            30_000
        );
    }

    #[test]
    fn bad_parameters_are_refused_with_the_name() {
        let err = Backoff::exponential(0.5, Duration::from_secs(1)).unwrap_err();
        assert!(
            err.to_string()
                .contains("circuitBreaker.backoff.multiplier")
        );
        assert!(Backoff::exponential(f64::NAN, Duration::from_secs(1)).is_err());
        let err = Backoff::exponential(2.0, Duration::ZERO).unwrap_err();
        assert!(err.to_string().contains("circuitBreaker.backoff.max"));
    }

    #[test]
    fn a_custom_function_sees_the_context_and_its_panic_falls_back() {
        let backoff = Backoff::custom(|ctx| match ctx.trigger {
            OpenTrigger::TripNow => Duration::from_millis(1),
            _ => ctx.sleep_window * (ctx.reopens + 1),
        });
        assert_eq!(backoff.open_duration_ms(100, 2, OpenTrigger::Health), 300);
        assert_eq!(backoff.open_duration_ms(100, 2, OpenTrigger::TripNow), 1);
        let panicking = Backoff::custom(|_| panic!("no"));
        assert_eq!(panicking.open_duration_ms(700, 1, OpenTrigger::Health), 700);
    }
}
