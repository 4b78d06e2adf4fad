//! What a breaker decides on: its window of calls (`circuitBreaker.window.type`).
//!
//! - `TIME` (Hystrix, the default): the completed health buckets of the last
//!   `metrics.rollingStats.timeInMilliseconds`, checked once per health interval (a command's
//!   own breaker reads its rolling counters; a keyed breaker its compact ring).
//! - `COUNT` (resilience4j's COUNT_BASED): the last `circuitBreaker.window.size` calls, checked
//!   at each call's end.
//! - `CONSECUTIVE` (gobreaker's default rule): the failures in a row, checked at each call's
//!   end; a success ends the run.
//!
//! Both per-call windows are lock-free and O(1) per call: a COUNT window is a ring of one byte
//! per call and its totals in one word; a CONSECUTIVE window one counter.

#[cfg(hystrix_loom)]
use loom::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::fmt;
#[cfg(not(hystrix_loom))]
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

use crate::config::{CommandProperties, PropertyType, PropertyValue};
use crate::metrics::HealthCounts;
use crate::metrics::health_ring::HealthRing;

/// The kind of window a breaker trips on (`circuitBreaker.window.type`; fixed once the key
/// exists).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum WindowType {
    /// `TIME` (default, Hystrix): the error and slow-call percentages over the completed health
    /// buckets of `metrics.rollingStats.timeInMilliseconds`, checked once per
    /// `metrics.healthSnapshot.intervalInMilliseconds`; trips with at least
    /// `circuitBreaker.requestVolumeThreshold` requests in it.
    #[default]
    Time,
    /// `COUNT` (resilience4j's `COUNT_BASED`): the percentages over the last
    /// `circuitBreaker.window.size` calls, checked at the end of each call while the window
    /// holds failures or slow calls (and at each health check); trips with at least
    /// min(`requestVolumeThreshold`, `window.size`) calls in it.
    Count,
    /// `CONSECUTIVE` (gobreaker's default rule): trips at the end of the
    /// `circuitBreaker.window.consecutiveFailures`-th failure in a row (a slow call counts as a
    /// failure here; any other success ends the run).
    Consecutive,
}

impl WindowType {
    /// The property's word: `TIME`, `COUNT` or `CONSECUTIVE`.
    pub const fn name(self) -> &'static str {
        match self {
            WindowType::Time => "TIME",
            WindowType::Count => "COUNT",
            WindowType::Consecutive => "CONSECUTIVE",
        }
    }
}

impl fmt::Display for WindowType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Also accepts resilience4j's words, `TIME_BASED` and `COUNT_BASED`, for teams migrating.
impl PropertyType for WindowType {
    fn parse(value: &PropertyValue) -> Result<Self, String> {
        const EXPECTED: &str = "expected TIME, COUNT or CONSECUTIVE";
        let PropertyValue::Str(word) = value else {
            return Err(EXPECTED.into());
        };
        match word.trim().to_ascii_uppercase().as_str() {
            "TIME" | "TIME_BASED" => Ok(WindowType::Time),
            "COUNT" | "COUNT_BASED" => Ok(WindowType::Count),
            "CONSECUTIVE" => Ok(WindowType::Consecutive),
            _ => Err(EXPECTED.into()),
        }
    }

    fn to_value(&self) -> Option<PropertyValue> {
        Some(PropertyValue::Str(self.name().to_owned()))
    }
}

/// The largest `circuitBreaker.window.size`.
pub(crate) const MAX_COUNT_WINDOW: u32 = 65_535;

/// The largest `circuitBreaker.window.size` of a command with keyed breakers: each keeps its
/// own window of one byte per call, and an idle keyed breaker stays within 512 bytes.
pub(crate) const MAX_KEYED_COUNT_WINDOW: u32 = 200;

/// How one call ended, as a window counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CallOutcome {
    /// FAILURE, TIMEOUT or a bulkhead rejection.
    pub(crate) error: bool,
    /// Slower than `circuitBreaker.slowCall.durationThresholdInMilliseconds`.
    pub(crate) slow: bool,
}

/// A COUNT window: the outcomes of the last `len` calls, and their totals.
///
/// Each call takes the next slot of the ring (one `fetch_add`), swaps its outcome in (one
/// `swap`) and moves the totals by the difference with the outcome it replaced (one
/// `fetch_add`). The three totals share one word, each field biased by 2^19 so that the
/// transient negatives of racing calls never borrow from the next field; a reader clamps.
#[derive(Debug)]
pub(crate) struct CountWindow {
    outcomes: Box<[AtomicU8]>,
    cursor: AtomicU64,
    totals: AtomicU64,
}

const PRESENT: u8 = 1;
const ERROR: u8 = 2;
const SLOW: u8 = 4;
const FIELD_BITS: u32 = 21;
const FIELD_MASK: u64 = (1 << FIELD_BITS) - 1;
const BIAS: u64 = 1 << 19;
const BIASED_ZERO: u64 = BIAS | BIAS << FIELD_BITS | BIAS << (2 * FIELD_BITS);

/// A slot's outcome as a difference of the packed totals.
fn weight(slot: u8) -> u64 {
    u64::from(slot & PRESENT)
        | u64::from((slot & ERROR) >> 1) << FIELD_BITS
        | u64::from((slot & SLOW) >> 2) << (2 * FIELD_BITS)
}

impl CountWindow {
    /// A window of the last `len` calls (1 to 65 535).
    pub(crate) fn new(len: u32) -> Self {
        let len = len.clamp(1, MAX_COUNT_WINDOW) as usize;
        CountWindow {
            outcomes: (0..len).map(|_| AtomicU8::new(0)).collect(),
            cursor: AtomicU64::new(0),
            totals: AtomicU64::new(BIASED_ZERO),
        }
    }

    /// Counts one call; returns the window's counts with it.
    pub(crate) fn record(&self, outcome: CallOutcome) -> HealthCounts {
        let slot =
            PRESENT | if outcome.error { ERROR } else { 0 } | if outcome.slow { SLOW } else { 0 };
        let index = self.cursor.fetch_add(1, Ordering::Relaxed) % self.outcomes.len() as u64;
        let replaced = self.outcomes[index as usize].swap(slot, Ordering::AcqRel);
        let delta = weight(slot).wrapping_sub(weight(replaced));
        let totals = self
            .totals
            .fetch_add(delta, Ordering::AcqRel)
            .wrapping_add(delta);
        self.counts(totals)
    }

    /// The counts now.
    pub(crate) fn health(&self) -> HealthCounts {
        self.counts(self.totals.load(Ordering::Acquire))
    }

    fn counts(&self, totals: u64) -> HealthCounts {
        let len = self.outcomes.len() as u64;
        let field = |shift: u32| {
            ((totals >> shift) & FIELD_MASK)
                .saturating_sub(BIAS)
                .min(len)
        };
        HealthCounts::with_slow_calls(field(0), field(FIELD_BITS), field(2 * FIELD_BITS))
    }

    /// Empties the window (the breaker closed).
    pub(crate) fn restart(&self) {
        for outcome in self.outcomes.iter() {
            let replaced = outcome.swap(0, Ordering::AcqRel);
            if replaced != 0 {
                self.totals.fetch_sub(weight(replaced), Ordering::AcqRel);
            }
        }
    }

    /// Bytes on the heap.
    pub(crate) fn heap_bytes(&self) -> usize {
        self.outcomes.len()
    }
}

/// A CONSECUTIVE window: failures (and slow calls) in a row.
#[derive(Debug, Default)]
pub(crate) struct Consecutive(AtomicU32);

impl Consecutive {
    /// Counts one call; returns the failures in a row with it.
    pub(crate) fn record(&self, outcome: CallOutcome) -> u32 {
        if outcome.error || outcome.slow {
            return self.0.fetch_add(1, Ordering::AcqRel).saturating_add(1);
        }
        // A read first: a run of successes does not write the shared line.
        if self.0.load(Ordering::Relaxed) != 0 {
            self.0.store(0, Ordering::Release);
        }
        0
    }

    /// Adds `count` slow calls still in flight to the run; returns the failures in a row.
    pub(crate) fn add(&self, count: u32) -> u32 {
        self.0
            .fetch_add(count, Ordering::AcqRel)
            .saturating_add(count)
    }

    /// The failures in a row now.
    pub(crate) fn get(&self) -> u32 {
        self.0.load(Ordering::Acquire)
    }

    /// Ends the run (the breaker closed).
    pub(crate) fn restart(&self) {
        self.0.store(0, Ordering::Release);
    }
}

/// A breaker's window: which one, and its own state unless the command's counters hold it.
#[derive(Debug, Default)]
pub(crate) enum Window {
    /// TIME for a command's own breaker: the command's rolling counters are the window.
    #[default]
    Counters,
    /// TIME for a keyed breaker: its compact ring of health buckets.
    Ring(HealthRing),
    /// COUNT.
    Count(CountWindow),
    /// CONSECUTIVE.
    Consecutive(Consecutive),
}

impl Window {
    /// The window `props` asks for: for a keyed breaker when `keyed`, else for a command's
    /// own breaker.
    pub(crate) fn new(props: &CommandProperties, keyed: bool) -> Self {
        match props.circuit_breaker_window_type {
            WindowType::Time if keyed => {
                let bucket_ms = props
                    .metrics_health_snapshot_interval_in_milliseconds
                    .max(1);
                let buckets =
                    u32::try_from(props.metrics_rolling_stats_time_in_milliseconds / bucket_ms)
                        .unwrap_or(u32::MAX)
                        .max(1);
                Window::Ring(HealthRing::new(bucket_ms, buckets))
            }
            WindowType::Time => Window::Counters,
            WindowType::Count => Window::Count(CountWindow::new(props.circuit_breaker_window_size)),
            WindowType::Consecutive => Window::Consecutive(Consecutive::default()),
        }
    }

    /// Bytes on the heap.
    pub(crate) fn heap_bytes(&self) -> usize {
        match self {
            Window::Ring(ring) => ring.heap_bytes(),
            Window::Count(count) => count.heap_bytes(),
            Window::Counters | Window::Consecutive(_) => 0,
        }
    }
}

/// Why a window trips the breaker, or `None` while it does not: TIME and COUNT windows on the
/// error percentage (`circuitBreaker.errorThresholdPercentage`) or, with slow calls on, the
/// slow-call percentage (`circuitBreaker.slowCall.rateThresholdPercentage`), given the volume;
/// CONSECUTIVE on the failures in a row.
pub(crate) fn trip_reason(
    kind: WindowType,
    health: &HealthCounts,
    props: &CommandProperties,
) -> Option<TripReason> {
    let (volume, requests, over): (u32, fn(u64) -> String, String) = match kind {
        WindowType::Consecutive => {
            let needed = props.circuit_breaker_window_consecutive_failures;
            return (health.error_count >= u64::from(needed)).then(|| TripReason {
                message: format!(
                    "{} failures or slow calls in a row (circuitBreaker.window.consecutiveFailures \
                     {needed})",
                    health.error_count
                ),
                on_errors: true,
            });
        }
        WindowType::Count => {
            let size = props.circuit_breaker_window_size;
            let volume = props.circuit_breaker_request_volume_threshold.min(size);
            (
                volume,
                |requests: u64| format!("the last {requests} calls"),
                String::new(),
            )
        }
        WindowType::Time => (
            props.circuit_breaker_request_volume_threshold,
            |requests: u64| format!("{requests} requests"),
            format!(
                " in the last {} ms",
                props.metrics_rolling_stats_time_in_milliseconds
            ),
        ),
    };
    let volume = u64::from(volume);
    let error_limit = props.circuit_breaker_error_threshold_percentage;
    if health.total_requests >= volume && health.error_percentage >= error_limit {
        return Some(TripReason {
            message: format!(
                "{}% of {} failed{over} (circuitBreaker.errorThresholdPercentage \
                 {error_limit}%)",
                health.error_percentage,
                requests(health.total_requests)
            ),
            on_errors: true,
        });
    }
    let slow_ms = props.circuit_breaker_slow_call_duration_threshold_in_milliseconds;
    let slow_limit = props.circuit_breaker_slow_call_rate_threshold_percentage;
    let slow_requests = health.slow_call_requests();
    (slow_ms > 0 && slow_requests >= volume && health.slow_call_percentage >= slow_limit).then(
        || {
            let running = match health.slow_calls_in_flight {
                0 => String::new(),
                n => format!(", {n} of them still running"),
            };
            TripReason {
                message: format!(
                    "slow calls: {}% of {} took longer than {slow_ms} ms{over}{running} \
                     (circuitBreaker.slowCall.rateThresholdPercentage {slow_limit}%)",
                    health.slow_call_percentage,
                    requests(slow_requests)
                ),
                on_errors: false,
            }
        },
    )
}

/// Why a window trips its breaker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TripReason {
    /// In words, for the trip cause.
    pub(crate) message: String,
    /// On failures (the trip cause then names the latest failure's kind), not slow calls.
    pub(crate) on_errors: bool,
}

#[cfg(all(test, not(hystrix_loom)))]
mod tests {
    use super::*;

    const OK: CallOutcome = CallOutcome {
        error: false,
        slow: false,
    };
    const FAILED: CallOutcome = CallOutcome {
        error: true,
        slow: false,
    };
    const SLOW: CallOutcome = CallOutcome {
        error: false,
        slow: true,
    };

    /// `circuitBreaker.window.type`'s words: what a user writes, what the configuration shows
    /// back (`to_value`) and what messages print (`Display`).
    #[test]
    fn each_window_type_reads_and_prints_as_its_property_word() {
        use crate::config::{PropertyType, PropertyValue};
        for (kind, word) in [
            (WindowType::Time, "TIME"),
            (WindowType::Count, "COUNT"),
            (WindowType::Consecutive, "CONSECUTIVE"),
        ] {
            assert_eq!(kind.to_string(), word);
            assert_eq!(kind.to_value(), Some(PropertyValue::Str(word.into())));
            assert_eq!(
                WindowType::parse(&PropertyValue::Str(word.into())),
                Ok(kind)
            );
        }
    }

    #[test]
    fn a_count_window_holds_the_last_calls_only() {
        let window = CountWindow::new(4);
        assert_eq!(window.health(), HealthCounts::new(0, 0));
        window.record(FAILED);
        window.record(SLOW);
        assert_eq!(window.record(OK), HealthCounts::with_slow_calls(3, 1, 1));
        window.record(FAILED);
        // The fifth call replaces the first (a failure).
        let counts = window.record(OK);
        assert_eq!(counts, HealthCounts::with_slow_calls(4, 1, 1));
        assert_eq!(counts.error_percentage, 25);
        assert_eq!(counts.slow_call_percentage, 25);
        window.restart();
        assert_eq!(window.health(), HealthCounts::new(0, 0));
        assert_eq!(window.record(FAILED), HealthCounts::new(1, 1));
    }

    #[test]
    fn a_consecutive_window_counts_failures_in_a_row() {
        let window = Consecutive::default();
        assert_eq!(window.record(FAILED), 1);
        assert_eq!(window.record(SLOW), 2);
        assert_eq!(window.record(OK), 0);
        assert_eq!(window.record(FAILED), 1);
        assert_eq!(window.add(3), 4);
        window.restart();
        assert_eq!(window.get(), 0);
    }

    #[test]
    fn window_types_parse_their_words() {
        for kind in [WindowType::Time, WindowType::Count, WindowType::Consecutive] {
            let word = PropertyValue::Str(kind.name().to_lowercase());
            assert_eq!(WindowType::parse(&word), Ok(kind));
        }
        assert!(WindowType::parse(&PropertyValue::Str("SLIDING".into())).is_err());
        // resilience4j's words.
        let count_based = PropertyValue::Str("COUNT_BASED".into());
        assert_eq!(WindowType::parse(&count_based), Ok(WindowType::Count));
        let time_based = PropertyValue::Str("time_based".into());
        assert_eq!(WindowType::parse(&time_based), Ok(WindowType::Time));
    }
}

#[cfg(all(test, hystrix_loom))]
mod loom_tests {
    use loom::sync::Arc;
    use loom::thread;

    use super::*;

    /// Two calls lap a COUNT window of one slot while a third thread reads: the packed totals
    /// never borrow from one field into the next (each field stays within one of its true
    /// value), and end exactly at the outcome last written.
    #[test]
    fn racing_calls_never_borrow_across_fields() {
        loom::model(|| {
            let window = Arc::new(CountWindow::new(1));
            let outcomes = [
                CallOutcome {
                    error: true,
                    slow: false,
                },
                CallOutcome {
                    error: false,
                    slow: true,
                },
            ];
            let writers: Vec<_> = outcomes
                .into_iter()
                .map(|outcome| {
                    let window = Arc::clone(&window);
                    thread::spawn(move || {
                        window.record(outcome);
                    })
                })
                .collect();
            let seen = window.totals.load(Ordering::Acquire);
            for shift in [0, FIELD_BITS, 2 * FIELD_BITS] {
                let field = (seen >> shift) & FIELD_MASK;
                assert!(field + 1 >= BIAS && field <= BIAS + 2, "field {field}");
            }
            for writer in writers {
                writer.join().unwrap();
            }
            let last = window.outcomes[0].load(Ordering::Acquire);
            assert_eq!(
                window.totals.load(Ordering::Acquire),
                BIASED_ZERO.wrapping_add(weight(last))
            );
            let health = window.health();
            assert_eq!(health.total_requests, 1);
            assert_eq!(health.error_count + health.slow_call_count, 1);
        });
    }
}
