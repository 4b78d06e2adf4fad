//! Retry through the breaker, with a budget.
//!
//! A retryable execution is built from a **factory** of runs
//! ([`Command::run_retryable`](crate::Command::run_retryable),
//! [`run_cancellable_retryable`](crate::Command::run_cancellable_retryable),
//! [`run_async_retryable`](crate::Command::run_async_retryable)): a run cannot be called or
//! polled twice, and a timed-out blocking attempt may still own its closure on a pool thread,
//! so each attempt gets a fresh run. With `retry.maxAttempts` at 1 (the default) it executes
//! exactly as a single run.
//!
//! Each attempt goes through the whole pipeline below the attempt loop: the breaker (its own
//! ticket: an attempt is one request for health, so the breaker can open in the middle of a
//! sequence and stop it), the attempt deadline, isolation and the run. The execution deadline
//! is fixed when the execution starts and bounds attempts and delays together; the fallback
//! runs once, after the last attempt.
//!
//! **What is retried**: FAILURE and TIMEOUT; rejections (semaphore, pool, adaptive limit,
//! adaptive throttling) only with `retry.onRejection`. Never SHORT_CIRCUITED (the breaker says the fault is not transient),
//! BAD_REQUEST or IGNORED, nor an error whose [`RetryAnswer`] says no, nor anything once the
//! breaker is open, unless the error asked for a minimum delay (e.g. `Retry-After`) that fits
//! in the remaining deadline. A delay that does not fit in the remaining deadline abandons at
//! once: nothing sleeps past the deadline.
//!
//! **Budget** (Finagle's RetryBudget, Envoy's retry budget): retries are at most
//! `retry.budget.percent` of the executions of the last `retry.budget.windowInMilliseconds`,
//! plus `retry.budget.minPerSecond` per second of the window. A refused retry records
//! RETRY_BUDGET_EXHAUSTED and the execution goes to its fallback.
//!
//! **Time**: with the default attempt timeout (the execution timeout ÷ `retry.maxAttempts`) the
//! delays between attempts also come out of the execution timeout, so the last attempt may
//! have less than its share: give the execution the time its attempts and delays need. The
//! execution's total time covers every attempt and delay; its execution time (the request
//! log's `[Nms]`, the execution latency) is the last attempt's run.
//!
//! **Threads**: a blocking attempt that times out keeps its pool thread until it returns (Rust
//! cannot interrupt a thread; a cancellable run sees its token cancelled), so one execution
//! can hold up to `retry.maxAttempts` pool threads: size the pool, or use cancellable or async
//! runs, for dependencies that hang.
//!
//! **RETRY** counts a retry the attempt loop granted (budget withdrawn, delay started): an
//! execution dropped during the delay, or whose next attempt the breaker refuses, still shows
//! it.
//!
//! **Stream commands and collapser batches** are not retried: a stream may have emitted
//! values before failing, and a batch's requests belong to many callers (retry each caller's
//! request, or give the batch command a retrying run of its own inside).

pub(crate) mod budget;

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::command::run::{RunFn, Start, sealed};
use crate::config::{CommandProperties, PropertyType, PropertyValue};
use crate::isolation::thread_pool::{Rejection, ThreadPool};

pub use budget::RetryBudgetCounts;

/// The second question a classifier answers about an error (the first is its
/// [`Class`](crate::Class) for the breaker): may the execution try again, and not before when?
///
/// The default answer is [`RetryAnswer::retry`]: retryable, no minimum delay. Set a
/// command's answers with [`CommandBuilder::classify_retry`](crate::CommandBuilder::classify_retry);
/// [`http::classify_status`](crate::http::classify_status) answers for HTTP responses.
///
/// ```
/// use hystrix::retry::RetryAnswer;
/// use std::time::Duration;
///
/// let answer = RetryAnswer::retry().after(Duration::from_secs(2)).overloaded();
/// assert!(answer.is_retryable());
/// assert_eq!(answer.min_delay(), Some(Duration::from_secs(2)));
/// assert!(answer.is_overload());
/// assert!(!RetryAnswer::never().is_retryable());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RetryAnswer {
    retryable: bool,
    min_delay: Option<Duration>,
    overload: bool,
}

impl Default for RetryAnswer {
    fn default() -> Self {
        RetryAnswer::retry()
    }
}

impl RetryAnswer {
    /// Retryable, after the usual backoff delay.
    pub const fn retry() -> Self {
        RetryAnswer {
            retryable: true,
            min_delay: None,
            overload: false,
        }
    }

    /// Not retryable: the execution goes to its fallback after this attempt.
    pub const fn never() -> Self {
        RetryAnswer {
            retryable: false,
            min_delay: None,
            overload: false,
        }
    }

    /// Not before `delay` (e.g. a `Retry-After` header): the next attempt waits at least this
    /// long, and if that does not fit in the execution's remaining deadline the execution
    /// goes to its fallback at once instead of sleeping.
    pub const fn after(mut self, delay: Duration) -> Self {
        self.min_delay = Some(delay);
        self
    }

    /// The error says the dependency is overloaded (e.g. HTTP 429 or 503): recorded for the
    /// policies that adapt to overload.
    pub const fn overloaded(mut self) -> Self {
        self.overload = true;
        self
    }

    /// Whether another attempt may follow.
    pub const fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// The least delay before another attempt, if the error asked for one.
    pub const fn min_delay(&self) -> Option<Duration> {
        self.min_delay
    }

    /// Whether the error signals overload.
    pub const fn is_overload(&self) -> bool {
        self.overload
    }
}

/// Random spread of retry delays (`retry.backoff.jitter`), as in the AWS Architecture Blog's
/// "Exponential Backoff And Jitter". Draws come from a seeded source
/// ([`RegistryBuilder::random_seed`](crate::RegistryBuilder::random_seed); fixed in a
/// [`TestRegistry`](crate::testing::TestRegistry)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum RetryJitter {
    /// `NONE` (default): exactly the backoff delay.
    #[default]
    None,
    /// `FULL`: uniform between 0 and the backoff delay.
    Full,
    /// `DECORRELATED`: uniform between the initial delay and 3 × the previous delay, capped by
    /// `retry.backoff.maxInMilliseconds` (the multiplier is not used).
    Decorrelated,
}

impl RetryJitter {
    /// The property's word: `NONE`, `FULL` or `DECORRELATED`.
    pub const fn name(self) -> &'static str {
        match self {
            RetryJitter::None => "NONE",
            RetryJitter::Full => "FULL",
            RetryJitter::Decorrelated => "DECORRELATED",
        }
    }
}

impl fmt::Display for RetryJitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl PropertyType for RetryJitter {
    fn parse(value: &PropertyValue) -> Result<Self, String> {
        let PropertyValue::Str(word) = value else {
            return Err("expected NONE, FULL or DECORRELATED".into());
        };
        match word.trim().to_ascii_uppercase().as_str() {
            "NONE" => Ok(RetryJitter::None),
            "FULL" => Ok(RetryJitter::Full),
            "DECORRELATED" => Ok(RetryJitter::Decorrelated),
            _ => Err("expected NONE, FULL or DECORRELATED".into()),
        }
    }

    fn to_value(&self) -> Option<PropertyValue> {
        Some(PropertyValue::Str(self.name().to_owned()))
    }
}

/// A delay function replacing the backoff properties
/// ([`CommandBuilder::retry_backoff`](crate::CommandBuilder::retry_backoff)): called with the
/// number of the retry (1 for the first) and the previous delay (zero before the first), it
/// returns the delay before that retry. A minimum delay from the error still applies.
pub type BackoffFn = Arc<dyn Fn(u32, Duration) -> Duration + Send + Sync>;

// ------------------------------------------------------------------------------------------------
// Runs of later attempts

/// What makes the runs of the attempts after the first: nothing for a single run, a factory
/// for a retryable one.
#[doc(hidden)]
pub trait Again: Send + 'static {
    /// The run of a later attempt.
    type Run: RunFn;
    /// Whether there can be later attempts at all (false: the attempt loop compiles away).
    const RETRIES: bool;
    /// Where a hedging execution keeps its race (`()` when there are no later attempts).
    type Racing: crate::hedging::Racing<<Self::Run as RunFn>::Running, <Self::Run as RunFn>::Error>
        + Send
        + 'static;
    /// The run of the next attempt; `None` if there is none (or the factory panicked).
    fn next(&mut self) -> Option<Self::Run>;

    /// Where the current attempt's `tracing` span is kept (retryable runs only).
    fn span(&mut self) -> Option<&mut Option<tracing::Span>> {
        None
    }
}

/// No later attempts: a single run.
#[doc(hidden)]
pub struct Once<R>(std::marker::PhantomData<fn() -> R>);

impl<R> Default for Once<R> {
    fn default() -> Self {
        Once(std::marker::PhantomData)
    }
}

impl<R: RunFn> Again for Once<R> {
    type Run = R;
    const RETRIES: bool = false;
    type Racing = ();
    #[inline(always)]
    fn next(&mut self) -> Option<R> {
        None
    }
}

/// A retryable run: the first attempt's run, and the factory of the next ones (taken out when
/// the execution starts). Made by the `run_*_retryable` methods of [`Command`](crate::Command).
#[doc(hidden)]
pub struct Retrying<F, R> {
    first: R,
    factory: Option<F>,
}

impl<F, R> fmt::Debug for Retrying<F, R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Retrying(..)")
    }
}

impl<F, R> Retrying<F, R> {
    /// The first run is made now (making a run must not start it: a closure, a cold future).
    pub(crate) fn new<G>(mut make: F, wrap: fn(G) -> R) -> Self
    where
        F: FnMut() -> G,
    {
        let first = wrap(make());
        Retrying {
            first,
            factory: Some(make),
        }
    }
}

/// Later attempts of a retryable run: the factory, with the kind's wrapper.
#[doc(hidden)]
pub struct Attempts<F, G, R> {
    make: Option<F>,
    wrap: fn(G) -> R,
    span: Option<tracing::Span>,
}

impl<F, G, R> Again for Attempts<F, G, R>
where
    F: FnMut() -> G + Send + 'static,
    G: 'static,
    R: RunFn,
{
    type Run = R;
    const RETRIES: bool = true;
    type Racing = crate::hedging::RaceSlot<R::Running, R::Error>;
    fn next(&mut self) -> Option<R> {
        // A panicking factory ends the sequence: the execution goes to its fallback with the
        // last attempt's error.
        let make = self.make.as_mut()?;
        catch_unwind(AssertUnwindSafe(make)).ok().map(self.wrap)
    }

    fn span(&mut self) -> Option<&mut Option<tracing::Span>> {
        Some(&mut self.span)
    }
}

impl<F, R> sealed::Sealed for Retrying<F, R> {}

/// The wrapper of a kind's runs, as a function pointer (a run kind is a tuple struct).
#[doc(hidden)]
pub trait Wrap<G>: Sized {
    /// Wraps a run made by the factory.
    fn wrap(run: G) -> Self;
}

impl<G> Wrap<G> for crate::command::run::Blocking<G> {
    fn wrap(run: G) -> Self {
        crate::command::run::Blocking(run)
    }
}

impl<G> Wrap<G> for crate::command::run::Cancellable<G> {
    fn wrap(run: G) -> Self {
        crate::command::run::Cancellable(run)
    }
}

impl<G> Wrap<G> for crate::command::run::Async<G> {
    fn wrap(run: G) -> Self {
        crate::command::run::Async(run)
    }
}

impl<F, G, R> RunFn for Retrying<F, R>
where
    F: FnMut() -> G + Send + 'static,
    G: 'static,
    R: RunFn + Wrap<G>,
{
    type Output = R::Output;
    type Error = R::Error;
    type Running = R::Running;
    type Again = Attempts<F, G, R>;
    const BLOCKING: bool = R::BLOCKING;

    fn take_again(&mut self) -> Self::Again {
        Attempts {
            make: self.factory.take(),
            wrap: R::wrap,
            span: None,
        }
    }

    fn start_here(self, start: Start<'_>) -> Self::Running {
        self.first.start_here(start)
    }

    fn start_on_pool(
        self,
        start: Start<'_>,
        pool: &ThreadPool,
    ) -> Result<Self::Running, Rejection> {
        self.first.start_on_pool(start, pool)
    }
}

impl<F, R> crate::command::run::BlockingFn for Retrying<F, R>
where
    F: Send + 'static,
    R: crate::command::run::BlockingFn,
{
    type Output = R::Output;
    type Error = R::Error;
    const CANCELLABLE: bool = R::CANCELLABLE;
    fn call(
        self,
        token: Option<tokio_util::sync::CancellationToken>,
    ) -> Result<Self::Output, Self::Error> {
        self.first.call(token)
    }
}

// ------------------------------------------------------------------------------------------------
// Per-key retry state

/// What a command key keeps for retries: its budget (made at the first retry-enabled
/// execution), the custom delay function, the random source of jitter.
pub(crate) struct RetryState {
    budget: std::sync::OnceLock<Arc<budget::RetryBudget>>,
    pub(crate) backoff: std::sync::OnceLock<BackoffFn>,
    /// Each jitter draw seeds a generator from this counter's next value.
    random: AtomicU64,
    /// A retry property set on a key whose runs cannot be retried was logged.
    pub(crate) ignored_warned: AtomicBool,
}

impl fmt::Debug for RetryState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryState")
            .field("budget", &self.budget.get())
            .field("custom_backoff", &self.backoff.get().is_some())
            .finish_non_exhaustive()
    }
}

impl RetryState {
    pub(crate) fn new(seed: u64) -> Self {
        RetryState {
            budget: std::sync::OnceLock::new(),
            backoff: std::sync::OnceLock::new(),
            random: AtomicU64::new(seed),
            ignored_warned: AtomicBool::new(false),
        }
    }

    /// The key's budget: its own, or the named one it shares (made by the first user).
    pub(crate) fn budget(
        &self,
        props: &CommandProperties,
        named: impl FnOnce(&str, u64) -> Arc<budget::RetryBudget>,
    ) -> &Arc<budget::RetryBudget> {
        self.budget.get_or_init(|| {
            let window_ms = props.retry_budget_window_in_milliseconds;
            match &props.retry_budget_name {
                Some(name) => named(name, window_ms),
                None => Arc::new(budget::RetryBudget::new(window_ms)),
            }
        })
    }

    /// The budget, if made.
    pub(crate) fn budget_if_made(&self) -> Option<&Arc<budget::RetryBudget>> {
        self.budget.get()
    }

    /// A uniform draw in `0..=max`.
    fn draw(&self, max: u64) -> u64 {
        let seed = self.random.fetch_add(1, Ordering::Relaxed);
        fastrand::Rng::with_seed(seed).u64(0..=max)
    }
}

/// The delay before retry number `retry` (1 for the first), in ms, from the backoff
/// properties (or the custom function), with jitter; `previous_ms` is the delay before the
/// previous retry (0 before the first).
pub(crate) fn backoff_ms(
    state: &RetryState,
    props: &CommandProperties,
    retry: u32,
    previous_ms: u64,
) -> u64 {
    if let Some(custom) = state.backoff.get() {
        let delay = catch_unwind(AssertUnwindSafe(|| {
            custom(retry, Duration::from_millis(previous_ms))
        }));
        // A panicking delay function counts as no delay (logged once per call site would
        // flood; the run's own failure is what the caller sees).
        return delay.map_or(0, crate::config::ceil_millis);
    }
    let initial = props.retry_backoff_initial_in_milliseconds;
    let max = props.retry_backoff_max_in_milliseconds;
    let exponential = || {
        let factor = props
            .retry_backoff_multiplier
            .powi(i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX));
        let delay = initial as f64 * factor;
        if delay.is_finite() && delay < max as f64 {
            delay as u64
        } else {
            max
        }
    };
    match props.retry_backoff_jitter {
        RetryJitter::None => exponential(),
        RetryJitter::Full => state.draw(exponential()),
        RetryJitter::Decorrelated => {
            let previous = if previous_ms == 0 {
                initial
            } else {
                previous_ms
            };
            let upper = previous.saturating_mul(3).max(initial);
            let spread = upper - initial;
            initial.saturating_add(state.draw(spread)).min(max)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(jitter: RetryJitter) -> CommandProperties {
        CommandProperties {
            retry_backoff_initial_in_milliseconds: 100,
            retry_backoff_multiplier: 2.0,
            retry_backoff_max_in_milliseconds: 1_000,
            retry_backoff_jitter: jitter,
            ..CommandProperties::default()
        }
    }

    #[test]
    fn exponential_delays_double_up_to_the_cap() {
        let state = RetryState::new(0);
        let props = props(RetryJitter::None);
        let delays: Vec<u64> = (1..=6).map(|n| backoff_ms(&state, &props, n, 0)).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1_000, 1_000]);
    }

    #[test]
    fn constant_delays_with_a_multiplier_of_one() {
        let state = RetryState::new(0);
        let mut props = props(RetryJitter::None);
        props.retry_backoff_multiplier = 1.0;
        let delays: Vec<u64> = (1..=3).map(|n| backoff_ms(&state, &props, n, 0)).collect();
        assert_eq!(delays, [100, 100, 100]);
    }

    #[test]
    fn full_jitter_stays_within_the_backoff_and_repeats_with_the_seed() {
        let props = props(RetryJitter::Full);
        let run = || {
            let state = RetryState::new(42);
            (1..=5)
                .map(|n| backoff_ms(&state, &props, n, 0))
                .collect::<Vec<_>>()
        };
        let first = run();
        assert_eq!(first, run());
        for (n, delay) in first.iter().enumerate() {
            assert!(*delay <= [100, 200, 400, 800, 1_000][n], "{first:?}");
        }
    }

    #[test]
    fn decorrelated_jitter_stays_between_initial_and_three_times_the_previous() {
        let state = RetryState::new(7);
        let props = props(RetryJitter::Decorrelated);
        let mut previous = 0;
        for n in 1..=20 {
            let delay = backoff_ms(&state, &props, n, previous);
            let upper = if previous == 0 { 300 } else { previous * 3 };
            assert!(
                (100..=upper.min(1_000)).contains(&delay),
                "{delay} after {previous}"
            );
            previous = delay;
        }
    }

    #[test]
    fn a_custom_function_replaces_the_properties() {
        let state = RetryState::new(0);
        let custom: BackoffFn =
            Arc::new(|retry, previous| previous + Duration::from_millis(u64::from(retry) * 10));
        assert!(state.backoff.set(custom).is_ok());
        let props = props(RetryJitter::None);
        assert_eq!(backoff_ms(&state, &props, 1, 0), 10);
        assert_eq!(backoff_ms(&state, &props, 2, 10), 30);
    }

    #[test]
    fn jitter_words_parse_in_any_case() {
        for (word, jitter) in [
            ("none", RetryJitter::None),
            (" Full ", RetryJitter::Full),
            ("DECORRELATED", RetryJitter::Decorrelated),
        ] {
            assert_eq!(RetryJitter::parse(&PropertyValue::from(word)), Ok(jitter));
        }
        assert!(RetryJitter::parse(&PropertyValue::from("half")).is_err());
        assert!(RetryJitter::parse(&PropertyValue::Int(1)).is_err());
    }
}
