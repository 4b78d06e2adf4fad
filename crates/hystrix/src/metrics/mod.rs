//! Command metrics: rolling and cumulative counts per event type, health counts for the circuit
//! breaker, latency percentiles, and concurrency.
//!
//! Three windows per command key, all rolling lazily on access (buckets are retired as time
//! passes, by whoever touches the window next; no timer thread):
//! - events: `metrics.rollingStats.timeInMilliseconds` / `numBuckets` (10 000 ms / 10);
//! - health: buckets of `metrics.healthSnapshot.intervalInMilliseconds` (500 ms) over the
//!   rolling-stats window (20 buckets), as Hystrix's `HealthCountsStream`;
//! - latency: `metrics.rollingPercentile.timeInMilliseconds` / `numBuckets` (60 000 ms / 6).
//!
//! Beside the latency window, each key keeps cumulative latency histograms (a count per bucket
//! of [`LATENCY_BUCKET_BOUNDS_MS`] and a sum, see [`CumulativeHistogram`]) for exporters that
//! aggregate across instances, such as Prometheus.
//!
//! The first two are read from one ring of event counters in buckets of the greatest common
//! divisor of their bucket sizes (500 ms by default): an execution's outcome is counted once,
//! and the health counts are the sums of its health events.
//!
//! Rolling values cover the completed buckets of their window; cumulative values everything since
//! the key's state was created.

#[cfg(feature = "metrics")]
pub mod facade;
pub(crate) mod health_ring;
mod histogram;
pub(crate) mod latency;
pub(crate) mod rolling;

use std::sync::atomic::{AtomicU64, Ordering};

pub(crate) use histogram::CumulativeCounts;
pub use histogram::{
    BATCH_SIZE_BUCKET_BOUNDS, CumulativeHistogram, LATENCY_BUCKET_BOUNDS_MS,
    LATENCY_BUCKET_BOUNDS_SECONDS,
};
pub use latency::LatencyPercentiles;
use latency::RollingLatency;
use rolling::{RollingCounts, View, gcd};

use crate::command::ExecutionResult;
use crate::config::CommandProperties;
use crate::event::{EventCounts, EventType, MULTIPLE_MASK, THROWS_MASK};
use crate::isolation::priority::PrioritySnapshot;
use crate::key::CommandKey;

/// The health counters of outcomes taken out of health (see `CommandCounters::stale`).
const TOTAL: usize = 0;
const ERRORS: usize = 1;
/// The slow-call adjustments of health (see `CommandCounters::slow`): slow calls taken out of
/// health, attempts counted slow while still running, and the ends of those.
const SLOW: usize = 0;
const SAMPLED: usize = 1;
const ENDED: usize = 2;

/// Events that count as a request in health; the error ones count as errors too (as in Hystrix,
/// plus IGNORED, our event, as a success).
const HEALTH_OK: u32 = EventType::Success.bit() | EventType::Ignored.bit();
const HEALTH_ERROR: u32 = EventType::Failure.bit()
    | EventType::Timeout.bit()
    | EventType::ThreadPoolRejected.bit()
    | EventType::SemaphoreRejected.bit();

/// The live metrics of one command key.
#[derive(Debug)]
pub(crate) struct CommandCounters {
    /// Per event type, in fine buckets (see the module docs).
    events: RollingCounts<{ EventType::COUNT }>,
    /// The rolling-stats window over `events`.
    rolling: View,
    /// The health window over `events`.
    health: View,
    /// Health outcomes of executions admitted before the breaker's latest transition: they
    /// count in `events` but not in the new health window, so health subtracts them. Made at
    /// first use.
    stale: std::sync::OnceLock<Box<RollingCounts<2>>>,
    /// With slow calls: the slow calls of those outcomes (SLOW, subtracted), the attempts
    /// counted slow while running (SAMPLED) and the ends of those (ENDED): SAMPLED less ENDED
    /// are slow calls still running. Made at first use.
    slow: std::sync::OnceLock<Box<RollingCounts<3>>>,
    /// The fine bucket size and the buckets kept, to make `stale` and `slow`.
    fine: (u64, u64),
    /// Health counts start at this health bucket (moved when the breaker closes).
    health_from: AtomicU64,
    /// What that bucket held (requests, errors, slow calls, slow calls counted while running,
    /// and ends of those) when health restarted: not counted.
    health_baseline: [AtomicU64; 5],
    /// Execution latencies of executions whose total latency differed. Made at first use.
    execution_latency: std::sync::OnceLock<Box<Latencies>>,
    /// Total latencies of executions whose execution latency differed (or had none). Made at
    /// first use.
    total_latency: std::sync::OnceLock<Box<Latencies>>,
    /// Latencies of executions whose execution and total latency were equal (the common case
    /// in whole ms): recorded once, read as part of both distributions.
    same_latency: Latencies,
}

/// Latencies in ms: the rolling window of the percentiles and the cumulative histogram.
#[derive(Debug)]
struct Latencies {
    window: RollingLatency,
    histogram: CumulativeCounts,
}

impl Latencies {
    /// Counts `ms` in the histogram and, when `percentiles`, in the rolling window.
    #[inline]
    fn record(&self, now_ms: u64, ms: u64, percentiles: bool) {
        if percentiles {
            self.window.record(now_ms, ms);
        }
        self.histogram.record(&LATENCY_BUCKET_BOUNDS_MS, ms);
    }

    /// Empty latencies with the window's buckets.
    fn empty_like(&self) -> Self {
        Latencies {
            window: self.window.empty_like(),
            histogram: CumulativeCounts::default(),
        }
    }

    /// Heap bytes of the window's tables (the histogram is inline).
    fn heap_bytes(&self) -> usize {
        self.window.heap_bytes()
    }
}

/// The breaker's view: requests, errors and slow calls over its window (as Hystrix's
/// `HealthCounts`, plus slow calls; see [`WindowType`](crate::circuit::WindowType) for the
/// windows other than Hystrix's TIME).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HealthCounts {
    /// Requests: SUCCESS, FAILURE, TIMEOUT, THREAD_POOL_REJECTED, SEMAPHORE_REJECTED and IGNORED
    /// (each attempt once, when it ended). Under a COUNT window, the calls it holds (an
    /// attempt counted slow while running among them); under a CONSECUTIVE window, the
    /// failures in a row.
    pub total_requests: u64,
    /// Errors: FAILURE, TIMEOUT, THREAD_POOL_REJECTED, SEMAPHORE_REJECTED. Under a CONSECUTIVE
    /// window: the failures in a row.
    pub error_count: u64,
    /// `error_count * 100 / total_requests`, truncated (1 of 3 is 33); 0 with no requests.
    pub error_percentage: u32,
    /// Slow calls: requests that took longer than
    /// `circuitBreaker.slowCall.durationThresholdInMilliseconds` (none is counted while slow
    /// calls are off; those counted before stay in the window until they leave it), and the
    /// attempts still running past it ([`slow_calls_in_flight`](Self::slow_calls_in_flight)).
    pub slow_call_count: u64,
    /// `slow_call_count * 100 / (total_requests + slow_calls_in_flight)`, truncated; 0 with
    /// no requests.
    pub slow_call_percentage: u32,
    /// Attempts counted slow while still running (`circuitBreaker.slowCall.countInFlight`,
    /// TIME window) that have not become requests: in `slow_call_count` and in the slow-call
    /// percentage's requests, not in `total_requests` (so they never lower the error
    /// percentage). One that ends in the same breaker generation becomes the request it was,
    /// with its error if it failed; one dropped by its caller, or ending after the breaker
    /// moved on, stays counted here until it leaves the window.
    pub slow_calls_in_flight: u64,
}

/// `part * 100 / whole`, truncated (as Hystrix's HealthCounts: 1 of 3 is 33); 0 of nothing.
fn percent(part: u64, whole: u64) -> u32 {
    (part.saturating_mul(100))
        .checked_div(whole)
        .map_or(0, |percent| percent.min(100) as u32)
}

impl HealthCounts {
    /// Counts of `total_requests` requests, `error_count` of them errors; the percentage is
    /// computed as Hystrix's (integer, rounded down; 0 with no requests).
    pub fn new(total_requests: u64, error_count: u64) -> Self {
        Self::with_slow_calls(total_requests, error_count, 0)
    }

    /// Counts of `total_requests` requests, `error_count` of them errors and
    /// `slow_call_count` of them slow; both percentages as [`new`](Self::new)'s.
    pub fn with_slow_calls(total_requests: u64, error_count: u64, slow_call_count: u64) -> Self {
        HealthCounts {
            total_requests,
            error_count,
            error_percentage: percent(error_count, total_requests),
            slow_call_count,
            slow_call_percentage: percent(slow_call_count, total_requests),
            slow_calls_in_flight: 0,
        }
    }

    /// These counts with `running` more slow calls still running (in the slow calls and the
    /// slow-call percentage's requests, not in `total_requests`).
    pub fn with_slow_in_flight(self, running: u64) -> Self {
        let slow_call_count = self.slow_call_count + running;
        let slow_calls_in_flight = self.slow_calls_in_flight + running;
        HealthCounts {
            slow_call_count,
            slow_call_percentage: percent(
                slow_call_count,
                self.total_requests + slow_calls_in_flight,
            ),
            slow_calls_in_flight,
            ..self
        }
    }

    /// The requests the slow-call percentage is of: the ended ones and the slow calls still
    /// running.
    pub fn slow_call_requests(&self) -> u64 {
        self.total_requests + self.slow_calls_in_flight
    }
}

impl CommandCounters {
    /// Windows sized by the key's (fixed) metrics properties.
    pub(crate) fn new(props: &CommandProperties) -> Self {
        let window_ms = props.metrics_rolling_stats_time_in_milliseconds;
        let buckets = props.metrics_rolling_stats_num_buckets;
        let health_ms = props.metrics_health_snapshot_interval_in_milliseconds;
        let latency_ms = props.metrics_rolling_percentile_time_in_milliseconds;
        let latency_buckets = props.metrics_rolling_percentile_num_buckets;
        let bucket_ms = window_ms / u64::from(buckets);
        let fine_ms = gcd(bucket_ms, health_ms);
        let rolling = View::new(bucket_ms, fine_ms, buckets);
        let health = View::new(health_ms, fine_ms, (window_ms / health_ms) as u32);
        let kept = rolling.fine_buckets_kept().max(health.fine_buckets_kept());
        CommandCounters {
            events: RollingCounts::new(fine_ms, kept),
            rolling,
            health,
            stale: std::sync::OnceLock::new(),
            slow: std::sync::OnceLock::new(),
            fine: (fine_ms, kept),
            health_from: AtomicU64::new(0),
            health_baseline: std::array::from_fn(|_| AtomicU64::new(0)),
            execution_latency: std::sync::OnceLock::new(),
            total_latency: std::sync::OnceLock::new(),
            same_latency: Latencies {
                window: RollingLatency::new(
                    latency_ms / u64::from(latency_buckets),
                    latency_buckets,
                ),
                histogram: CumulativeCounts::default(),
            },
        }
    }

    /// Counts a finished execution at `now_ms`: `events` (its events less those counted
    /// already, by [`record_attempt`](CommandCounters::record_attempt)), EXCEPTION_THROWN if
    /// its caller got an error from a disabled fallback, and, unless `latencies` is `None` (an
    /// execution refused before it ran: it has none), its execution and total latency: in the
    /// histograms, and in the percentiles' windows when `Some(true)`
    /// (`metrics.rollingPercentile.enabled`). When not `health`, its health outcome is taken
    /// out of the health counts.
    #[inline]
    pub(crate) fn record(
        &self,
        now_ms: u64,
        result: &ExecutionResult,
        events: &EventCounts,
        fallback_disabled: bool,
        latencies: Option<bool>,
        health: bool,
    ) {
        self.count_events(now_ms, events, health);
        // EXCEPTION_THROWN is derived when read (as Hystrix's aggregation does): its counter
        // only holds the errors no event shows, those of a disabled fallback.
        if fallback_disabled {
            self.events
                .add(now_ms, EventType::ExceptionThrown.index(), 1);
        }
        if let Some(percentiles) = latencies {
            self.record_latencies(now_ms, result, percentiles);
        }
    }

    /// Counts the events of one attempt of an execution that goes on (a retry follows) at
    /// `now_ms`, as they happen: each attempt is a request for health. When not `health`
    /// (admitted before the breaker's latest transition), its health outcome is taken out of
    /// the health counts.
    #[cold]
    pub(crate) fn record_attempt(&self, now_ms: u64, events: &EventCounts, health: bool) {
        self.count_events(now_ms, events, health);
    }

    #[inline(always)]
    fn count_events(&self, now_ms: u64, events: &EventCounts, health: bool) {
        let bits = events.bits();
        let mut once = bits & !MULTIPLE_MASK;
        while once != 0 {
            let index = once.trailing_zeros() as usize;
            once &= once - 1;
            self.events.add(now_ms, index, 1);
        }
        let mut multiple = bits & MULTIPLE_MASK;
        while multiple != 0 {
            let index = multiple.trailing_zeros() as usize;
            multiple &= multiple - 1;
            self.events
                .add(now_ms, index, events.count(EventType::ALL[index]));
        }
        if !health && bits & (HEALTH_OK | HEALTH_ERROR) != 0 {
            let stale = self.stale_outcomes();
            stale.add(now_ms, TOTAL, 1);
            if bits & HEALTH_ERROR != 0 {
                stale.add(now_ms, ERRORS, 1);
            }
            if bits & EventType::SlowCall.bit() != 0 {
                self.slow_adjust()
                    .add(now_ms, SLOW, events.count(EventType::SlowCall));
            }
        }
    }

    #[inline]
    fn record_latencies(&self, now_ms: u64, result: &ExecutionResult, percentiles: bool) {
        // Execution latency only if user code started; total latency unless refused before
        // any run started (Hystrix: not for short-circuits and rejections; an execution whose
        // earlier attempt ran has one).
        let refused = EventType::ShortCircuited.bit()
            | EventType::SemaphoreRejected.bit()
            | EventType::ThreadPoolRejected.bit();
        let total_ms = (result.events.bits() & refused == 0 || result.execution_time_ms.is_some())
            .then_some(result.total_time_ms);
        match (result.execution_time_ms, total_ms) {
            // One counter instead of two for the usual execution.
            (Some(execution_ms), Some(total_ms)) if execution_ms == total_ms => {
                self.same_latency.record(now_ms, execution_ms, percentiles);
            }
            (execution_ms, total_ms) => {
                if let Some(execution_ms) = execution_ms {
                    self.apart(&self.execution_latency)
                        .record(now_ms, execution_ms, percentiles);
                }
                if let Some(total_ms) = total_ms {
                    self.apart(&self.total_latency)
                        .record(now_ms, total_ms, percentiles);
                }
            }
        }
    }

    /// `window` (execution or total latencies recorded apart), made at first use with the
    /// window of `same_latency`.
    #[cold]
    fn apart<'a>(&self, window: &'a std::sync::OnceLock<Box<Latencies>>) -> &'a Latencies {
        window.get_or_init(|| Box::new(self.same_latency.empty_like()))
    }

    /// User code of an execution started with `concurrency` executions running (this one
    /// included): feeds the rolling maximum.
    #[inline]
    pub(crate) fn started(&self, now_ms: u64, concurrency: u32) {
        self.events.raise_max(now_ms, concurrency);
    }

    /// The health counts at `now_ms`: the completed health buckets of the window, since the
    /// last restart.
    pub(crate) fn health(&self, now_ms: u64) -> HealthCounts {
        let from = self.health_from.load(Ordering::Acquire);
        let mut counts = self.health_in(self.health.completed(now_ms, from));
        // The restart bucket is in the window: what it held at the restart does not count.
        if self.health.is_completed(now_ms, from) {
            for (count, baseline) in counts.iter_mut().zip(&self.health_baseline) {
                *count = count.saturating_sub(baseline.load(Ordering::Relaxed));
            }
        }
        let [total, errors, slow, sampled, ended] = counts;
        HealthCounts::with_slow_calls(total, errors, slow.min(total))
            .with_slow_in_flight(sampled.saturating_sub(ended))
    }

    /// Counts `count` attempts still running past the slow-call threshold at `now_ms` as slow
    /// calls for health, until they end.
    #[cold]
    pub(crate) fn count_slow_in_flight(&self, now_ms: u64, count: u32) {
        self.slow_adjust().add(now_ms, SAMPLED, count);
    }

    /// An attempt counted slow while running ended at `now_ms`: from now on it counts as the
    /// request it was (with its events), no longer as a slow call running.
    #[cold]
    pub(crate) fn slow_in_flight_ended(&self, now_ms: u64) {
        self.slow_adjust().add(now_ms, ENDED, 1);
    }

    /// The slow-call adjustments, made at first use.
    #[cold]
    fn slow_adjust(&self) -> &RollingCounts<3> {
        let (fine_ms, kept) = self.fine;
        self.slow
            .get_or_init(|| Box::new(RollingCounts::new(fine_ms, kept)))
    }

    /// The outcomes taken out of health, made at first use.
    #[cold]
    fn stale_outcomes(&self) -> &RollingCounts<2> {
        let (fine_ms, kept) = self.fine;
        self.stale
            .get_or_init(|| Box::new(RollingCounts::new(fine_ms, kept)))
    }

    /// [requests, errors, slow calls, slow calls counted while running, ends of those] of the
    /// health events in the fine buckets `range`, less the outcomes taken out of health.
    fn health_in(&self, range: std::ops::Range<u64>) -> [u64; 5] {
        let sum = |mask: u32| {
            self.events.sum_by(range.clone(), |counters, tag| {
                let mut bits = mask;
                let mut sum = 0;
                while bits != 0 {
                    let index = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    sum += u64::from(counters[index].get(tag));
                }
                sum
            })
        };
        let errors = sum(HEALTH_ERROR);
        let total = errors + sum(HEALTH_OK);
        let in_range = |counters: &[crate::metrics::rolling::EpochCounter], index: usize, tag| {
            u64::from(counters[index].get(tag))
        };
        let stale = |index: usize| {
            self.stale.get().map_or(0, |stale| {
                stale.sum_by(range.clone(), |counters, tag| {
                    in_range(counters, index, tag)
                })
            })
        };
        let total = total.saturating_sub(stale(TOTAL));
        let errors = errors.saturating_sub(stale(ERRORS));
        let slow = sum(EventType::SlowCall.bit());
        let Some(slow_adjust) = self.slow.get() else {
            return [total, errors, slow, 0, 0];
        };
        let adjusted = |index: usize| {
            slow_adjust.sum_by(range.clone(), |counters, tag| {
                in_range(counters, index, tag)
            })
        };
        [
            total,
            errors,
            slow.saturating_sub(adjusted(SLOW)),
            adjusted(SAMPLED),
            adjusted(ENDED),
        ]
    }

    /// Restarts the health window from zero at `now_ms` (the breaker closed): the health
    /// bucket filling counts from now on.
    pub(crate) fn restart_health(&self, now_ms: u64) {
        let counts = self.health_in(self.events.filling(&self.health, now_ms));
        for (baseline, count) in self.health_baseline.iter().zip(counts) {
            baseline.store(count, Ordering::Relaxed);
        }
        self.health_from
            .store(self.health.epoch(now_ms), Ordering::Release);
    }

    /// (requests, errors) counted for health since creation, stale outcomes included (what a
    /// shared state store aggregates across instances).
    pub(crate) fn cumulative_health(&self) -> (u64, u64) {
        let totals = self.events.cumulatives();
        let sum = |mask: u32| {
            let mut bits = mask;
            let mut sum = 0;
            while bits != 0 {
                let index = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                sum += totals[index];
            }
            sum
        };
        let errors = sum(HEALTH_ERROR);
        (errors + sum(HEALTH_OK), errors)
    }

    /// A snapshot at `now_ms`; `executing` is the number of executions running now.
    pub(crate) fn snapshot(
        &self,
        command_key: CommandKey,
        now_ms: u64,
        executing: u32,
        latencies: bool,
    ) -> CommandMetrics {
        let latency = |apart: &std::sync::OnceLock<Box<Latencies>>| {
            if !latencies {
                LatencyPercentiles::DISABLED
            } else if let Some(apart) = apart.get() {
                latency::percentiles_of(&[&apart.window, &self.same_latency.window], now_ms)
            } else {
                latency::percentiles_of(&[&self.same_latency.window], now_ms)
            }
        };
        let histogram = |apart: &std::sync::OnceLock<Box<Latencies>>| match apart.get() {
            Some(apart) => CumulativeCounts::read(
                &LATENCY_BUCKET_BOUNDS_MS,
                &[&apart.histogram, &self.same_latency.histogram],
            ),
            None => {
                CumulativeCounts::read(&LATENCY_BUCKET_BOUNDS_MS, &[&self.same_latency.histogram])
            }
        };
        CommandMetrics {
            command_key,
            rolling: with_exceptions_thrown(self.events.rolling_sums(&self.rolling, now_ms)),
            cumulative: with_exceptions_thrown(self.events.cumulatives()),
            health: self.health(now_ms),
            current_concurrent_execution_count: executing,
            rolling_max_concurrent_execution_count: self.events.rolling_max(&self.rolling, now_ms),
            execution_latency: latency(&self.execution_latency),
            total_latency: latency(&self.total_latency),
            execution_histogram: histogram(&self.execution_latency),
            total_histogram: histogram(&self.total_latency),
            circuit_open_duration_ms: None,
            adaptive_limit: None,
            priorities: None,
            throttle: None,
        }
    }

    /// Bytes this key's metrics take now (windows and the latency counters allocated so far).
    pub(crate) fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>()
            + self.events.heap_bytes()
            + self.stale.get().map_or(0, |stale| {
                std::mem::size_of::<RollingCounts<2>>() + stale.heap_bytes()
            })
            + self.slow.get().map_or(0, |slow| {
                std::mem::size_of::<RollingCounts<3>>() + slow.heap_bytes()
            })
            + [&self.execution_latency, &self.total_latency]
                .into_iter()
                .filter_map(std::sync::OnceLock::get)
                .map(|apart| std::mem::size_of::<Latencies>() + apart.heap_bytes())
                .sum::<usize>()
            + self.same_latency.heap_bytes()
    }
}

/// Adds to EXCEPTION_THROWN the executions whose caller got an error shown by an event: a bad
/// request, or a failed, missing or rejected fallback (one per execution at most).
fn with_exceptions_thrown(mut counts: [u64; EventType::COUNT]) -> [u64; EventType::COUNT] {
    let mut throws = THROWS_MASK;
    while throws != 0 {
        let index = throws.trailing_zeros() as usize;
        throws &= throws - 1;
        counts[EventType::ExceptionThrown.index()] += counts[index];
    }
    counts
}

/// A snapshot of one command key's metrics, read without stopping writers (as Hystrix's
/// `HystrixCommandMetrics`). Take one with [`Command::metrics`](crate::Command::metrics) or
/// [`Registry::command_metrics`](crate::Registry::command_metrics).
///
/// ```
/// use hystrix::testing::TestRegistry;
/// use hystrix::{Command, EventType, IsolationStrategy};
/// use std::time::Duration;
///
/// let test = TestRegistry::new();
/// let cmd = Command::builder("GetUser")
///     .group("Users")
///     .isolation(IsolationStrategy::Semaphore)
///     .build_in(test.registry())?;
/// for ms in [10, 20, 30] {
///     let clock = test.clone();
///     // A run that takes `ms` on the manual clock.
///     cmd.run(move || {
///         clock.advance(Duration::from_millis(ms));
///         Ok::<_, std::io::Error>(())
///     })
///     .execute()?;
/// }
/// // Rolling values cover completed buckets: 1000 ms for counts, 10 000 ms for latencies.
/// test.advance(Duration::from_millis(10_000));
/// let metrics = cmd.metrics();
/// assert_eq!(metrics.rolling_count(EventType::Success), 3);
/// assert_eq!(metrics.execution_latency().p50, 20);
/// assert_eq!(metrics.execution_latency().p100, 30);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct CommandMetrics {
    command_key: CommandKey,
    rolling: [u64; EventType::COUNT],
    cumulative: [u64; EventType::COUNT],
    health: HealthCounts,
    current_concurrent_execution_count: u32,
    rolling_max_concurrent_execution_count: u64,
    execution_latency: LatencyPercentiles,
    total_latency: LatencyPercentiles,
    execution_histogram: CumulativeHistogram,
    total_histogram: CumulativeHistogram,
    circuit_open_duration_ms: Option<u64>,
    adaptive_limit: Option<AdaptiveLimitSnapshot>,
    /// Boxed: present only while priority reserves are set.
    priorities: Option<Box<PrioritySnapshot>>,
    throttle: Option<ThrottleSnapshot>,
}

/// A command's adaptive concurrency limit at one instant (see
/// [`CommandMetrics::adaptive_limit`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AdaptiveLimitSnapshot {
    /// The limit in force: the algorithm's, capped by
    /// `execution.isolation.semaphore.maxConcurrentRequests` (executions).
    pub limit: u32,
    /// Executions admitted by the limit and not yet ended (their permits held). Above
    /// `limit` after the limit fell below what was already admitted (nothing more is admitted
    /// until it is below again), and, as
    /// [`current_concurrent_execution_count`](CommandMetrics::current_concurrent_execution_count),
    /// one more for an instant while an execution is refused.
    pub in_flight: u32,
    /// Executions waiting for a place (at most `execution.isolation.adaptive.maxQueueSize`).
    pub queued: u32,
}

/// A command's client-side adaptive throttling at one instant (see
/// [`CommandMetrics::throttle`] and [`throttle`](crate::throttle)): the counts of its window
/// (`execution.throttle.windowInMilliseconds`, the bucket filling included) and the
/// probability they give.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThrottleSnapshot {
    /// Attempts in the window that ran or were throttled.
    pub requests: u64,
    /// Attempts in the window that ran and that the backend did not reject as overloaded.
    pub accepts: u64,
    /// The probability (0.0 to 1.0) with which the next attempt is throttled:
    /// max(0, (requests − K × accepts) / (requests + 1)), K being
    /// `execution.throttle.multiplier` (Google SRE book, Handling Overload: K = 2).
    pub probability: f64,
}

/// The probability is never NaN (K is validated finite and at least 1).
impl Eq for ThrottleSnapshot {}

impl std::fmt::Debug for CommandMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        struct Named<'a>(&'a [u64; EventType::COUNT]);
        impl std::fmt::Debug for Named<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_map()
                    .entries(
                        EventType::ALL
                            .iter()
                            .zip(self.0)
                            .filter(|(_, count)| **count > 0)
                            .map(|(event, count)| (event.name(), count)),
                    )
                    .finish()
            }
        }
        f.debug_struct("CommandMetrics")
            .field("command_key", &self.command_key)
            .field("rolling", &Named(&self.rolling))
            .field("cumulative", &Named(&self.cumulative))
            .field("health", &self.health)
            .field(
                "current_concurrent_execution_count",
                &self.current_concurrent_execution_count,
            )
            .field(
                "rolling_max_concurrent_execution_count",
                &self.rolling_max_concurrent_execution_count,
            )
            .field("execution_latency", &self.execution_latency)
            .field("total_latency", &self.total_latency)
            .field("execution_histogram", &self.execution_histogram)
            .field("total_histogram", &self.total_histogram)
            .field("circuit_open_duration_ms", &self.circuit_open_duration_ms)
            .field("adaptive_limit", &self.adaptive_limit)
            .field("throttle", &self.throttle)
            .finish()
    }
}

impl CommandMetrics {
    /// The command key.
    pub fn command_key(&self) -> &CommandKey {
        &self.command_key
    }

    /// How many times `event` happened in the completed buckets of the rolling window
    /// (`metrics.rollingStats.*`, 10 × 1000 ms by default). `EXCEPTION_THROWN` counts executions
    /// whose caller got an error from a bad request or a failed, rejected, missing or disabled
    /// fallback; `FALLBACK_DISABLED` itself is never counted (as Hystrix, it is not an event of
    /// the execution).
    pub fn rolling_count(&self, event: EventType) -> u64 {
        self.rolling[event.index()]
    }

    /// How many times `event` happened since the key's state was created (same rules as
    /// [`rolling_count`](Self::rolling_count)). Never decreases.
    pub fn cumulative_count(&self, event: EventType) -> u64 {
        self.cumulative[event.index()]
    }

    /// How long the command's breaker stays open this time, in ms, while it is OPEN or
    /// HALF_OPEN (`None` when CLOSED): the sleep window grown by the open-duration
    /// [`Backoff`](crate::circuit::Backoff), or a trip-now minimum if longer.
    pub fn circuit_open_duration_ms(&self) -> Option<u64> {
        self.circuit_open_duration_ms
    }

    /// The adaptive concurrency limit, its executions in flight and its queue, while
    /// `execution.isolation.adaptive.enabled` is true (`None` otherwise). Its refusals are
    /// the LIMIT_REJECTED counts ([`rolling_count`](Self::rolling_count)).
    pub fn adaptive_limit(&self) -> Option<AdaptiveLimitSnapshot> {
        self.adaptive_limit
    }

    /// Executions by [`Priority`](crate::Priority) class: admitted, refused and in flight,
    /// and the places reserved now; `None` while no reserve is set
    /// (`execution.isolation.priority.critical.reservedPercentage` and
    /// `execution.isolation.priority.normal.reservedPercentage` both 0, the default).
    pub fn priorities(&self) -> Option<PrioritySnapshot> {
        self.priorities.as_deref().copied()
    }

    /// With the executions by priority class (see [`priorities`](Self::priorities)).
    pub(crate) fn with_priorities(mut self, priorities: Option<PrioritySnapshot>) -> Self {
        self.priorities = priorities.map(Box::new);
        self
    }

    /// Client-side adaptive throttling's requests, accepts and probability over its window,
    /// while `execution.throttle.enabled` is true (`None` otherwise). Its refusals are the
    /// THROTTLED counts ([`rolling_count`](Self::rolling_count)).
    pub fn throttle(&self) -> Option<ThrottleSnapshot> {
        self.throttle
    }

    /// With the throttling state (see [`throttle`](Self::throttle)).
    pub(crate) fn with_throttle(mut self, throttle: Option<ThrottleSnapshot>) -> Self {
        self.throttle = throttle;
        self
    }

    /// With the adaptive limit's state (see [`adaptive_limit`](Self::adaptive_limit)).
    pub(crate) fn with_adaptive_limit(mut self, adaptive: Option<AdaptiveLimitSnapshot>) -> Self {
        self.adaptive_limit = adaptive;
        self
    }

    /// With the breaker's open duration (see [`circuit_open_duration_ms`](Self::circuit_open_duration_ms)).
    pub(crate) fn with_open_duration(mut self, open_duration_ms: Option<u64>) -> Self {
        self.circuit_open_duration_ms = open_duration_ms;
        self
    }

    /// What the circuit breaker sees: requests, errors and the error percentage over the
    /// completed health buckets.
    pub fn health_counts(&self) -> HealthCounts {
        self.health
    }

    /// Executions whose user code is running now (Hystrix's `currentConcurrentExecutionCount`):
    /// execution permits held under SEMAPHORE isolation, runs on pool threads under THREAD. An
    /// attempt refused at that very moment may show as one more for an instant.
    pub fn current_concurrent_execution_count(&self) -> u32 {
        self.current_concurrent_execution_count
    }

    /// The most executions running at once, sampled at each start, over the rolling window
    /// (Hystrix's `rollingMaxConcurrentExecutionCount`).
    pub fn rolling_max_concurrent_execution_count(&self) -> u64 {
        self.rolling_max_concurrent_execution_count
    }

    /// Execution latency (from the start to the run's end or timeout, queue wait included) over
    /// the percentile window (`metrics.rollingPercentile.*`, 6 × 10 s by default), in ms.
    pub fn execution_latency(&self) -> LatencyPercentiles {
        self.execution_latency
    }

    /// Total latency (what the caller waited, fallback included) over the percentile window, in
    /// ms. Not recorded for short-circuits and rejections.
    pub fn total_latency(&self) -> LatencyPercentiles {
        self.total_latency
    }

    /// Execution latencies since the key was created, as a cumulative histogram in ms (see
    /// [`CumulativeHistogram`], bounds [`LATENCY_BUCKET_BOUNDS_MS`]): one value per execution whose user code started, as
    /// [`execution_latency`](Self::execution_latency) takes them. Recorded whatever
    /// `metrics.rollingPercentile.enabled` says (it turns the rolling percentiles off, not
    /// this: two atomic additions per execution).
    ///
    /// ```
    /// use hystrix::testing::TestRegistry;
    /// use hystrix::{Command, IsolationStrategy};
    /// use std::time::Duration;
    ///
    /// let test = TestRegistry::new();
    /// let cmd = Command::builder("GetUser")
    ///     .group("Users")
    ///     .isolation(IsolationStrategy::Semaphore)
    ///     .build_in(test.registry())?;
    /// for ms in [3, 40, 700] {
    ///     let clock = test.clone();
    ///     cmd.run(move || {
    ///         clock.advance(Duration::from_millis(ms));
    ///         Ok::<_, std::io::Error>(())
    ///     })
    ///     .execute()?;
    /// }
    /// // Cumulative: no need to wait for a window to complete.
    /// let histogram = cmd.metrics().execution_histogram();
    /// assert_eq!((histogram.count(), histogram.sum()), (3, 743));
    /// let at_most = |bound_ms| histogram.buckets().find(|&(le, _)| le == bound_ms).map(|(_, n)| n);
    /// assert_eq!(at_most(5), Some(1));
    /// assert_eq!(at_most(50), Some(2));
    /// assert_eq!(at_most(500), Some(2));
    /// assert_eq!(at_most(1_000), Some(3));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn execution_histogram(&self) -> CumulativeHistogram {
        self.execution_histogram
    }

    /// Total latencies (what the caller waited, fallback included) since the key was created,
    /// as a cumulative histogram in ms; not recorded for short-circuits and rejections.
    /// Recorded whatever `metrics.rollingPercentile.enabled` says.
    pub fn total_histogram(&self) -> CumulativeHistogram {
        self.total_histogram
    }
}
