//! Health probes (the cloud pattern's alternative to the sleep-window timer): while a breaker is
//! OPEN, a user function is called at an interval; a healthy answer moves it to HALF_OPEN at
//! once, so recovery is noticed without waiting out the open duration or risking a real
//! request. Probes run on the registry's executor, bounded in number and time.

use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Poll;
use std::time::Duration;

use super::{Site, Status};
use crate::clock::Sleep;
use crate::command::poll_caught;
use crate::config::ceil_millis;
use crate::error::ConfigError;
use crate::registry::CommandState;

type AsyncProbe = dyn Fn() -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync;

#[derive(Clone)]
enum Probe {
    Blocking(Arc<dyn Fn() -> bool + Send + Sync>),
    Async(Arc<AsyncProbe>),
}

/// A health probe for a command's breaker, set with
/// [`CommandBuilder::health_probe`](crate::command::CommandBuilder::health_probe).
///
/// From each opening on, the probe is called every `interval` (measured on the registry's
/// [`Clock`](crate::clock::Clock)) until it answers `true`, which moves the breaker to HALF_OPEN
/// (a [`HalfOpened { by_probe: true }`](crate::circuit::BreakerEventKind::HalfOpened) event);
/// the trials then decide as usual. A probe that panics, answers `false` or is not done
/// within its timeout (default: the interval) counts as unhealthy. At most
/// [`max_concurrent`](Self::max_concurrent) probes of one command run at once (default 1); a
/// due probe over that bound is skipped until the next interval. A blocking probe runs on a
/// thread of its own (`hystrix-probe`, so a stuck one never holds up the registry's shutdown)
/// and keeps its slot until it returns, even past its timeout; an async probe runs on the
/// registry's executor and is dropped at its timeout. With a shared state store, a healthy
/// answer moves the breaker only with the store's probe permit (asked for at the next sync
/// round, and granted once the shared open period is over), so one instance sends trials, not
/// all of them. By default the sleep window still moves the breaker
/// to HALF_OPEN too (whichever comes first);
/// [`instead_of_sleep_window`](Self::instead_of_sleep_window) leaves it to the probe alone.
///
/// ```
/// use hystrix::circuit::HealthProbe;
/// use std::time::Duration;
///
/// // Ask the dependency's health endpoint every second, for at most 200 ms.
/// let probe = HealthProbe::blocking(|| true /* e.g. GET /health == 200 */, Duration::from_secs(1))?
///     .timeout(Duration::from_millis(200))?;
/// # let _ = probe;
/// # Ok::<(), hystrix::ConfigError>(())
/// ```
#[derive(Clone)]
pub struct HealthProbe {
    probe: Probe,
    interval_ms: u64,
    timeout_ms: u64,
    max_concurrent: u32,
    only_probe: bool,
}

impl fmt::Debug for HealthProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HealthProbe")
            .field(
                "kind",
                &match self.probe {
                    Probe::Blocking(_) => "blocking",
                    Probe::Async(_) => "async",
                },
            )
            .field("interval_ms", &self.interval_ms)
            .field("timeout_ms", &self.timeout_ms)
            .field("max_concurrent", &self.max_concurrent)
            .field("only_probe", &self.only_probe)
            .finish()
    }
}

fn positive_ms(name: &str, value: Duration) -> Result<u64, ConfigError> {
    match ceil_millis(value) {
        0 => Err(ConfigError::InvalidValue {
            name: name.into(),
            value: format!("{value:?}"),
            reason: "must be at least 1 ms".into(),
        }),
        ms => Ok(ms),
    }
}

impl HealthProbe {
    /// A blocking probe called every `interval` (rounded up to whole ms).
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] naming `circuitBreaker.probe.interval` if `interval` is 0.
    pub fn blocking(
        probe: impl Fn() -> bool + Send + Sync + 'static,
        interval: Duration,
    ) -> Result<Self, ConfigError> {
        Self::with(Probe::Blocking(Arc::new(probe)), interval)
    }

    /// An async probe: `probe()` makes the future to await, every `interval`.
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] naming `circuitBreaker.probe.interval` if `interval` is 0.
    pub fn new_async<F, Fut>(probe: F, interval: Duration) -> Result<Self, ConfigError>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = bool> + Send + 'static,
    {
        let probe: Arc<AsyncProbe> = Arc::new(move || Box::pin(probe()));
        Self::with(Probe::Async(probe), interval)
    }

    fn with(probe: Probe, interval: Duration) -> Result<Self, ConfigError> {
        let interval_ms = positive_ms("circuitBreaker.probe.interval", interval)?;
        Ok(HealthProbe {
            probe,
            interval_ms,
            timeout_ms: interval_ms,
            max_concurrent: 1,
            only_probe: false,
        })
    }

    /// How long a probe may take before it counts as unhealthy (default: the interval).
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] naming `circuitBreaker.probe.timeout` if `timeout` is 0.
    pub fn timeout(mut self, timeout: Duration) -> Result<Self, ConfigError> {
        self.timeout_ms = positive_ms("circuitBreaker.probe.timeout", timeout)?;
        Ok(self)
    }

    /// At most this many probes of the command at once (default 1).
    pub fn max_concurrent(mut self, probes: NonZeroU32) -> Self {
        self.max_concurrent = probes.get();
        self
    }

    /// Only a healthy probe moves the breaker to HALF_OPEN; the sleep window no longer does.
    pub fn instead_of_sleep_window(mut self) -> Self {
        self.only_probe = true;
        self
    }
}

/// A command's probe and the probes of it running now.
pub(crate) struct ProbeState {
    probe: HealthProbe,
    running: Arc<AtomicU32>,
}

/// A running probe's place in the bound; given back when dropped.
struct Slot(Arc<AtomicU32>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ProbeState {
    pub(crate) fn new(probe: HealthProbe) -> Self {
        ProbeState {
            probe,
            running: Arc::new(AtomicU32::new(0)),
        }
    }

    pub(crate) fn only_probe(&self) -> bool {
        self.probe.only_probe
    }

    /// The next probe of the opening `generation`, one interval after `now_ms`.
    pub(crate) fn schedule(&self, command: &CommandState, generation: u32, now_ms: u64) {
        let weak = command.me.clone();
        let due = now_ms.saturating_add(self.probe.interval_ms);
        command.env.clock.schedule(
            due,
            Box::new(move || {
                if let Some(command) = weak.upgrade() {
                    fire(&command, generation);
                }
            }),
        );
    }
}

/// Whether the breaker is still OPEN in the opening `generation` (else the probes stop).
fn still_open(command: &CommandState, generation: u32) -> Option<super::state::Word> {
    let word = command.breaker.word();
    (word.status == Status::Open && word.generation == generation).then_some(word)
}

/// A probe is due: start it on the executor, or skip to the next interval.
fn fire(command: &Arc<CommandState>, generation: u32) {
    let Some(state) = &command.extras.probe else {
        return;
    };
    if still_open(command, generation).is_none() {
        return;
    }
    let now_ms = command.env.clock.now_ms();
    let taken = state
        .running
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |running| {
            (running < state.probe.max_concurrent).then_some(running + 1)
        });
    if taken.is_err() {
        state.schedule(command, generation, now_ms);
        return;
    }
    let slot = Slot(Arc::clone(&state.running));
    let Some(executor) = command.env.executor() else {
        return; // shut down
    };
    let deadline = Sleep::until(
        Arc::clone(&command.env.clock),
        now_ms.saturating_add(state.probe.timeout_ms),
    );
    let probe = state.probe.probe.clone();
    let command = Arc::clone(command);
    executor.spawn(async move {
        let healthy = match probe {
            Probe::Blocking(probe) => {
                // On a thread of its own, not the executor's blocking pool: a probe stuck in a
                // connect must not hold up the registry's shutdown.
                let answer = Arc::new(Answer::default());
                let answered = Arc::clone(&answer);
                let spawned = std::thread::Builder::new()
                    .name("hystrix-probe".into())
                    .spawn(move || {
                        let healthy = catch_unwind(AssertUnwindSafe(|| probe())).unwrap_or(false);
                        // Free before answering: the next probe may be due right after.
                        drop(slot);
                        answered.set(healthy);
                    });
                match spawned {
                    Ok(_) => deadline.race(answer.wait()).await,
                    Err(_) => Some(false),
                }
            }
            Probe::Async(probe) => {
                let _slot = slot;
                match catch_unwind(AssertUnwindSafe(|| probe())) {
                    Ok(future) => {
                        // A panic while polling reads as unhealthy.
                        let mut future = future;
                        let caught = std::future::poll_fn(move |cx| {
                            poll_caught(Pin::new(&mut future), cx).map(|ran| ran.unwrap_or(false))
                        });
                        deadline.race(caught).await
                    }
                    Err(_) => Some(false),
                }
            }
        };
        answered(&command, generation, healthy == Some(true));
    });
}

/// The probe answered (`false` also for a timeout or a panic).
fn answered(command: &Arc<CommandState>, generation: u32, healthy: bool) {
    let Some(word) = still_open(command, generation) else {
        return;
    };
    let now_ms = command.env.clock.now_ms();
    // With a shared state store, a healthy probe needs the store's permit too (one instance
    // probes the dependency with real trials, not all of them).
    let permitted = command
        .extras
        .shared
        .as_ref()
        .is_none_or(|shared| shared.probe_may_half_open());
    if healthy && permitted {
        command
            .breaker
            .half_open(Site::command(command), word, now_ms, true);
    } else if let Some(state) = &command.extras.probe {
        state.schedule(command, generation, now_ms);
    }
}

/// A blocking probe's answer, handed from its thread to the task that waits for it.
#[derive(Default)]
struct Answer(parking_lot::Mutex<(Option<bool>, Option<std::task::Waker>)>);

impl Answer {
    fn set(&self, healthy: bool) {
        let waker = {
            let mut answer = self.0.lock();
            answer.0 = Some(healthy);
            answer.1.take()
        };
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    fn wait(&self) -> impl Future<Output = bool> + '_ {
        std::future::poll_fn(move |cx| {
            let mut answer = self.0.lock();
            match answer.0 {
                Some(healthy) => Poll::Ready(healthy),
                None => {
                    answer.1 = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        })
    }
}
