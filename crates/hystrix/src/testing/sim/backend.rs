//! The fake backend: workers, a bounded queue, service times and failures on the clock.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp, LogNormal};

use super::{SimError, SimOutcome};
use crate::clock::{Clock, TimerId};

/// The standard normal quantile of 0.99: a log-normal's p99 is `median · e^(σ · Z99)`.
const Z99: f64 = 2.326_347_874_040_841;

/// How long a backend call keeps a worker busy, drawn per call from the backend's seeded
/// generator and rounded to the nearest whole millisecond (the clock's resolution).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServiceTime(TimeDist);

#[derive(Debug, Clone, Copy, PartialEq)]
enum TimeDist {
    Constant { ms: f64 },
    Exponential { mean_ms: f64 },
    LogNormal { median_ms: f64, p99_ms: f64 },
}

impl ServiceTime {
    /// Every call takes `time` (rounded to whole ms).
    pub fn constant(time: Duration) -> Self {
        ServiceTime(TimeDist::Constant {
            ms: duration_ms(time),
        })
    }

    /// Exponentially distributed with mean `mean` (rate 1/mean): memoryless, as an M/M/c
    /// queue's service. Its median is `mean · ln 2` (69 % of the mean), its p99 `mean · ln 100`
    /// (4.6 times the mean).
    pub fn exponential(mean: Duration) -> Self {
        ServiceTime(TimeDist::Exponential {
            mean_ms: duration_ms(mean),
        })
    }

    /// Log-normal, given by its median and its 99th percentile, the two numbers a latency
    /// dashboard shows: `ln T` is normal with mean `μ = ln median` and standard deviation
    /// `σ = ln(p99 / median) / 2.3263` (2.3263 is the standard normal's 0.99 quantile). So half
    /// the calls take less than `median`, 1 % more than `p99`; the mean is `median · e^(σ²/2)`.
    /// `p99` equal to `median` makes it constant.
    ///
    /// [`BackendBuilder::build`] refuses a median that is not positive or a p99 below it.
    pub fn lognormal(median: Duration, p99: Duration) -> Self {
        ServiceTime(TimeDist::LogNormal {
            median_ms: duration_ms(median),
            p99_ms: duration_ms(p99),
        })
    }

    fn sampler(&self, what: &str) -> Result<Sampler, SimError> {
        match self.0 {
            TimeDist::Constant { ms } => Ok(Sampler::Constant(ms)),
            TimeDist::Exponential { mean_ms } => {
                if mean_ms <= 0.0 {
                    return Ok(Sampler::Constant(0.0));
                }
                Exp::new(1.0 / mean_ms)
                    .map(Sampler::Exponential)
                    .map_err(|err| SimError::invalid(format!("{what}: exponential: {err}")))
            }
            TimeDist::LogNormal { median_ms, p99_ms } => {
                if median_ms <= 0.0 || p99_ms < median_ms {
                    return Err(SimError::invalid(format!(
                        "{what}: a log-normal needs 0 < median <= p99, got median {median_ms} ms \
                         and p99 {p99_ms} ms"
                    )));
                }
                let sigma = (p99_ms / median_ms).ln() / Z99;
                LogNormal::new(median_ms.ln(), sigma)
                    .map(Sampler::LogNormal)
                    .map_err(|err| SimError::invalid(format!("{what}: log-normal: {err}")))
            }
        }
    }
}

fn duration_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[derive(Debug, Clone, Copy)]
enum Sampler {
    Constant(f64),
    Exponential(Exp<f64>),
    LogNormal(LogNormal<f64>),
}

impl Sampler {
    /// One draw, in whole ms (nearest; never negative).
    fn sample_ms(&self, rng: &mut StdRng) -> u64 {
        let ms = match self {
            Sampler::Constant(ms) => *ms,
            Sampler::Exponential(exp) => exp.sample(rng),
            Sampler::LogNormal(lognormal) => lognormal.sample(rng),
        };
        // `as` saturates (NaN to 0); the draws are finite and non-negative anyway.
        ms.round().max(0.0) as u64
    }
}

/// A period of the backend's life with its own behaviour, e.g. "fail every call between 10 s
/// and 20 s" or "add 200 ms to every call". A phase covers the calls whose service **starts** in
/// `[from, until)`, in ms on the clock (a [`Sim`](super::Sim) starts at 0).
///
/// A phase may also change the backend's capacity: its [`workers`](Phase::workers) serve while
/// it lasts (calls in service when it starts finish; new ones start only while fewer than its
/// workers are busy), and its [`service_time_factor`](Phase::service_time_factor) scales the
/// calls that start in it.
///
/// Where phases overlap, the last one added that sets a failure rate (or workers) decides it,
/// and their extra latencies add up and their factors multiply.
#[derive(Debug, Clone, PartialEq)]
pub struct Phase {
    from_ms: u64,
    until_ms: u64,
    failure_rate: Option<f64>,
    extra_latency_ms: u64,
    workers: Option<usize>,
    service_time_factor: f64,
}

impl Phase {
    /// A phase from `from` (inclusive) to `until` (exclusive) on the clock, changing nothing
    /// until [`failure_rate`](Phase::failure_rate) or [`extra_latency`](Phase::extra_latency)
    /// says what.
    pub fn between(from: Duration, until: Duration) -> Self {
        Phase {
            from_ms: saturating_ms(from),
            until_ms: saturating_ms(until),
            failure_rate: None,
            extra_latency_ms: 0,
            workers: None,
            service_time_factor: 1.0,
        }
    }

    /// During the phase each call fails with probability `rate` (0.0 to 1.0; 1.0 is an outage)
    /// instead of the backend's own rate.
    #[must_use]
    pub fn failure_rate(mut self, rate: f64) -> Self {
        self.failure_rate = Some(rate);
        self
    }

    /// During the phase each call takes `extra` (whole ms) more than its drawn service time.
    #[must_use]
    pub fn extra_latency(mut self, extra: Duration) -> Self {
        self.extra_latency_ms = saturating_ms(extra);
        self
    }

    /// During the phase the backend has `workers` workers instead of its own (e.g. 10 of 40
    /// while part of a fleet is down). At the phase's start, calls in service beyond them finish
    /// their service; at its end, queued calls start at once in the workers it gives back.
    /// [`BackendBuilder::build`] refuses 0.
    #[must_use]
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = Some(workers);
        self
    }

    /// During the phase each call's drawn service time is multiplied by `factor` (2.0: every
    /// call takes twice as long), before [`extra_latency`](Phase::extra_latency) is added. The
    /// draws themselves are the same as without the phase. [`BackendBuilder::build`] refuses a
    /// factor that is negative or not finite.
    #[must_use]
    pub fn service_time_factor(mut self, factor: f64) -> Self {
        self.service_time_factor = factor;
        self
    }

    fn covers(&self, now_ms: u64) -> bool {
        self.from_ms <= now_ms && now_ms < self.until_ms
    }
}

fn saturating_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// What a backend call returns when it does not answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
#[non_exhaustive]
pub enum BackendError {
    /// The backend served the call and failed it (its failure rate or a failing phase), after
    /// the call's service time.
    #[error("the backend failed the call")]
    Failed,
    /// Refused at once: every worker was busy and the queue full.
    #[error("the backend is overloaded: every worker busy and the queue full")]
    Overloaded,
}

/// What a [`Backend`] saw, counted from its creation.
///
/// Once every caller is done and every call's service time has passed, `calls = succeeded +
/// failed + overloaded + abandoned_queued`, plus `abandoned_in_service` when the backend
/// [stops abandoned work](BackendBuilder::stops_abandoned_work) (otherwise those calls are
/// served to the end and counted as succeeded or failed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendStats {
    /// Calls that reached the backend: a [`BackendCall`] polled at least once. A call future
    /// dropped unpolled (a short-circuited or rejected execution) never reaches it.
    pub calls: u64,
    /// Calls served to the end with success.
    pub succeeded: u64,
    /// Calls served to the end with [`BackendError::Failed`].
    pub failed: u64,
    /// Calls refused with [`BackendError::Overloaded`].
    pub overloaded: u64,
    /// Calls whose caller went away (a timeout dropped the run) while they waited in the queue;
    /// they were never served.
    pub abandoned_queued: u64,
    /// Calls whose caller went away while a worker served them.
    pub abandoned_in_service: u64,
    /// The most calls in service at once (at most the workers).
    pub max_in_service: usize,
    /// The most calls waiting in the queue at once.
    pub max_queued: usize,
}

impl BackendStats {
    /// What happened after `earlier` was taken: counts less `earlier`'s (the maxima stay this
    /// snapshot's, over the whole run).
    pub fn since(&self, earlier: &BackendStats) -> BackendStats {
        BackendStats {
            calls: self.calls.saturating_sub(earlier.calls),
            succeeded: self.succeeded.saturating_sub(earlier.succeeded),
            failed: self.failed.saturating_sub(earlier.failed),
            overloaded: self.overloaded.saturating_sub(earlier.overloaded),
            abandoned_queued: self
                .abandoned_queued
                .saturating_sub(earlier.abandoned_queued),
            abandoned_in_service: self
                .abandoned_in_service
                .saturating_sub(earlier.abandoned_in_service),
            max_in_service: self.max_in_service,
            max_queued: self.max_queued,
        }
    }
}

/// Builds a [`Backend`]; see [`Backend::builder`] for the defaults.
#[derive(Debug, Clone)]
pub struct BackendBuilder {
    workers: usize,
    queue: usize,
    service_time: ServiceTime,
    failure_service_time: Option<ServiceTime>,
    failure_rate: f64,
    phases: Vec<Phase>,
    seed: u64,
    stops_abandoned_work: bool,
}

impl BackendBuilder {
    /// How many calls the backend serves at once (default 100; at least 1).
    #[must_use]
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers;
        self
    }

    /// How many calls may wait, first come first served, while every worker is busy (default
    /// 1000; 0 refuses at once). Calls beyond workers + queue fail at once with
    /// [`BackendError::Overloaded`]. Time in the queue counts in the caller's latency (and
    /// against its timeout).
    #[must_use]
    pub fn queue(mut self, queue: usize) -> Self {
        self.queue = queue;
        self
    }

    /// How long each call keeps its worker (default: a constant 10 ms).
    #[must_use]
    pub fn service_time(mut self, time: ServiceTime) -> Self {
        self.service_time = time;
        self
    }

    /// How long a failing call keeps its worker (default: the same as
    /// [`service_time`](BackendBuilder::service_time)); e.g. a constant 1 ms for a backend that
    /// refuses fast.
    #[must_use]
    pub fn failure_service_time(mut self, time: ServiceTime) -> Self {
        self.failure_service_time = Some(time);
        self
    }

    /// The probability, 0.0 to 1.0, that a call fails, each independently of the others
    /// (default 0.0), outside phases that set their own.
    #[must_use]
    pub fn failure_rate(mut self, rate: f64) -> Self {
        self.failure_rate = rate;
        self
    }

    /// Adds a [`Phase`] (scripted failures or latency over a period of time).
    #[must_use]
    pub fn phase(mut self, phase: Phase) -> Self {
        self.phases.push(phase);
        self
    }

    /// The seed of the generator every draw (failure, service time) comes from (default 0). The
    /// draws are made in the order calls start service, so one seed and one load give one run.
    #[must_use]
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Whether a call whose caller goes away while it is served frees its worker at once
    /// (`true`: the backend learns of the cancellation) or keeps it until its service time
    /// ends (`false`, the default: a server that finishes work nobody waits for any more, as
    /// most do when a client times out).
    #[must_use]
    pub fn stops_abandoned_work(mut self, stops: bool) -> Self {
        self.stops_abandoned_work = stops;
        self
    }

    /// The backend, on `clock` (the simulation's, [`Sim::clock`](super::Sim::clock)).
    ///
    /// # Errors
    /// [`SimError::Invalid`] for no workers, a failure rate outside 0.0 to 1.0 (the backend's
    /// or a phase's), a phase that ends before it starts, or a log-normal whose median is not
    /// positive or above its p99.
    pub fn build(self, clock: &Arc<dyn Clock>) -> Result<Backend, SimError> {
        if self.workers == 0 {
            return Err(SimError::invalid("a backend needs at least one worker"));
        }
        check_rate("the backend's failure rate", self.failure_rate)?;
        for (i, phase) in self.phases.iter().enumerate() {
            if phase.until_ms < phase.from_ms {
                return Err(SimError::invalid(format!(
                    "phase {i} ends ({} ms) before it starts ({} ms)",
                    phase.until_ms, phase.from_ms
                )));
            }
            if let Some(rate) = phase.failure_rate {
                check_rate(&format!("phase {i}'s failure rate"), rate)?;
            }
            if phase.workers == Some(0) {
                return Err(SimError::invalid(format!(
                    "phase {i} needs at least one worker"
                )));
            }
            if !(phase.service_time_factor.is_finite() && phase.service_time_factor >= 0.0) {
                return Err(SimError::invalid(format!(
                    "phase {i}'s service time factor must be a finite number >= 0, got {}",
                    phase.service_time_factor
                )));
            }
        }
        let service = self.service_time.sampler("service time")?;
        let failure_service = match self.failure_service_time {
            Some(time) => Some(time.sampler("failure service time")?),
            None => None,
        };
        // Where the workers change, queued calls may start: each such boundary is a timer.
        let mut boundaries: Vec<u64> = self
            .phases
            .iter()
            .filter(|phase| phase.workers.is_some())
            .flat_map(|phase| [phase.from_ms, phase.until_ms])
            .collect();
        boundaries.sort_unstable();
        boundaries.dedup();
        let backend = Backend {
            shared: Arc::new(Shared {
                clock: Arc::clone(clock),
                workers: self.workers,
                queue: self.queue,
                service,
                failure_service,
                failure_rate: self.failure_rate,
                phases: self.phases,
                stops_abandoned_work: self.stops_abandoned_work,
                state: Mutex::new(State {
                    rng: StdRng::seed_from_u64(self.seed),
                    next_id: 0,
                    calls: HashMap::new(),
                    queued: VecDeque::new(),
                    in_service: 0,
                    stats: BackendStats::default(),
                }),
            }),
        };
        for at_ms in boundaries {
            // Weak: a boundary never reached does not keep the backend alive.
            let weak = Arc::downgrade(&backend.shared);
            clock.schedule(
                at_ms,
                Box::new(move || {
                    if let Some(shared) = weak.upgrade() {
                        Backend { shared }.start_waiting();
                    }
                }),
            );
        }
        Ok(backend)
    }
}

fn check_rate(what: &str, rate: f64) -> Result<(), SimError> {
    if (0.0..=1.0).contains(&rate) {
        Ok(())
    } else {
        Err(SimError::invalid(format!(
            "{what} must be between 0.0 and 1.0, got {rate}"
        )))
    }
}

/// A fake dependency driven by the [`Clock`]: `workers` serve calls concurrently, each for a
/// drawn [`ServiceTime`]; further calls wait in a bounded FIFO `queue`; calls beyond both are
/// refused at once ([`BackendError::Overloaded`]). A served call fails with the backend's
/// failure rate, or its [`Phase`]'s. Every draw comes from one generator seeded by
/// [`seed`](BackendBuilder::seed).
///
/// Clones share one backend. [`call`](Backend::call) is the run of an execution:
/// `cmd.run_async(backend.call())`.
///
/// ```
/// use hystrix::testing::sim::{Backend, BackendError, ServiceTime, Sim, SimOutcome};
/// use std::time::Duration;
///
/// let mut sim = Sim::new();
/// let backend = Backend::builder()
///     .workers(1)
///     .queue(1)
///     .service_time(ServiceTime::constant(Duration::from_millis(30)))
///     .build(sim.clock())?;
/// let replies = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
/// for _ in 0..3 {
///     let (call, replies, clock) = (backend.call(), replies.clone(), sim.clock().clone());
///     sim.spawn(async move {
///         let reply = call.await;
///         replies.borrow_mut().push((clock.now_ms(), reply));
///     });
/// }
/// sim.run()?;
/// // One served, one queued behind it, one refused at once.
/// assert_eq!(*replies.borrow(), [
///     (0, Err(BackendError::Overloaded)),
///     (30, Ok(SimOutcome::Answered)),
///     (60, Ok(SimOutcome::Answered)),
/// ]);
/// assert_eq!(backend.stats().calls, 3);
/// assert_eq!(backend.stats().max_queued, 1);
/// # Ok::<(), hystrix::testing::sim::SimError>(())
/// ```
#[derive(Clone)]
pub struct Backend {
    shared: Arc<Shared>,
}

struct Shared {
    clock: Arc<dyn Clock>,
    workers: usize,
    queue: usize,
    service: Sampler,
    failure_service: Option<Sampler>,
    failure_rate: f64,
    phases: Vec<Phase>,
    stops_abandoned_work: bool,
    state: Mutex<State>,
}

struct State {
    rng: StdRng,
    next_id: u64,
    /// Calls queued or in service (and done ones not yet taken by their caller).
    calls: HashMap<u64, Call>,
    queued: VecDeque<u64>,
    in_service: usize,
    stats: BackendStats,
}

struct Call {
    stage: Stage,
    waker: Option<Waker>,
    /// The caller went away: nobody takes the result.
    abandoned: bool,
}

enum Stage {
    Queued,
    InService {
        timer: Option<TimerId>,
        result: Result<SimOutcome, BackendError>,
    },
    Done(Result<SimOutcome, BackendError>),
}

/// A service to start once the lock is released: (call id, its deadline in ms).
type Start = (u64, u64);

impl Backend {
    /// A builder with the defaults: 100 workers, a queue of 1000, a constant service time of
    /// 10 ms, no failures, no phases, seed 0, abandoned work served to the end.
    pub fn builder() -> BackendBuilder {
        BackendBuilder {
            workers: 100,
            queue: 1000,
            service_time: ServiceTime::constant(Duration::from_millis(10)),
            failure_service_time: None,
            failure_rate: 0.0,
            phases: Vec::new(),
            seed: 0,
            stops_abandoned_work: false,
        }
    }

    /// A call to the backend: a future that reaches the backend at its first poll and resolves
    /// once its service ends, with `Ok(SimOutcome::Answered)` (so a run and a fallback
    /// answering [`SimOutcome::Fallback`] have one value type) or a [`BackendError`].
    ///
    /// Dropping it before then withdraws it from the queue, or leaves its worker busy to the end
    /// of its service (unless the backend [stops abandoned
    /// work](BackendBuilder::stops_abandoned_work)).
    pub fn call(&self) -> BackendCall {
        BackendCall {
            backend: self.clone(),
            id: None,
            done: false,
        }
    }

    /// What the backend saw so far.
    pub fn stats(&self) -> BackendStats {
        self.shared.state.lock().stats
    }

    /// Calls being served now.
    pub fn in_service(&self) -> usize {
        self.shared.state.lock().in_service
    }

    /// Calls waiting in the queue now.
    pub fn queued(&self) -> usize {
        self.shared.state.lock().queued.len()
    }

    /// Registers a new call (its first poll): starts it, queues it or refuses it.
    fn arrive(&self, waker: &Waker) -> Result<u64, BackendError> {
        let start = {
            let mut guard = self.shared.state.lock();
            let state = &mut *guard;
            state.stats.calls += 1;
            let id = state.next_id;
            state.next_id += 1;
            if state.in_service < self.workers_now() {
                let start = self.begin_service(state, id);
                state.calls.insert(
                    id,
                    Call {
                        stage: start.1,
                        waker: Some(waker.clone()),
                        abandoned: false,
                    },
                );
                start.0
            } else if state.queued.len() < self.shared.queue {
                state.queued.push_back(id);
                state.stats.max_queued = state.stats.max_queued.max(state.queued.len());
                state.calls.insert(
                    id,
                    Call {
                        stage: Stage::Queued,
                        waker: Some(waker.clone()),
                        abandoned: false,
                    },
                );
                return Ok(id);
            } else {
                state.stats.overloaded += 1;
                return Err(BackendError::Overloaded);
            }
        };
        self.arm(start);
        Ok(start.0)
    }

    /// Takes a worker for call `id` now: draws its outcome and service time.
    fn begin_service(&self, state: &mut State, id: u64) -> (Start, Stage) {
        let shared = &*self.shared;
        let now = shared.clock.now_ms();
        state.in_service += 1;
        state.stats.max_in_service = state.stats.max_in_service.max(state.in_service);
        let mut rate = shared.failure_rate;
        let mut extra_ms = 0u64;
        let mut factor = 1.0;
        for phase in shared.phases.iter().filter(|p| p.covers(now)) {
            if let Some(phase_rate) = phase.failure_rate {
                rate = phase_rate;
            }
            extra_ms = extra_ms.saturating_add(phase.extra_latency_ms);
            factor *= phase.service_time_factor;
        }
        // Both draws always happen, in this order, so one seed gives one sequence.
        let fails = state.rng.random::<f64>() < rate;
        let sampler = match (&shared.failure_service, fails) {
            (Some(failure_service), true) => failure_service,
            _ => &shared.service,
        };
        let drawn_ms = sampler.sample_ms(&mut state.rng);
        let scaled_ms = if factor == 1.0 {
            drawn_ms
        } else {
            // `as` saturates; the factor is finite and non-negative (checked at build).
            (drawn_ms as f64 * factor).round() as u64
        };
        let service_ms = scaled_ms.saturating_add(extra_ms);
        let result = if fails {
            Err(BackendError::Failed)
        } else {
            Ok(SimOutcome::Answered)
        };
        (
            (id, now.saturating_add(service_ms)),
            Stage::InService {
                timer: None,
                result,
            },
        )
    }

    /// Schedules the end of a service, with no lock held: on a manual clock a deadline already
    /// reached fires inside `schedule`.
    fn arm(&self, (id, deadline_ms): Start) {
        let backend = self.clone();
        let timer = self
            .shared
            .clock
            .schedule(deadline_ms, Box::new(move || backend.finish(id)));
        let mut state = self.shared.state.lock();
        if let Some(Call {
            stage: Stage::InService { timer: slot, .. },
            ..
        }) = state.calls.get_mut(&id)
        {
            *slot = Some(timer);
        }
    }

    /// The end of call `id`'s service (its timer): frees the worker, hands the result over and
    /// starts the next queued call.
    fn finish(&self, id: u64) {
        let (waker, starts) = {
            let mut guard = self.shared.state.lock();
            let state = &mut *guard;
            let Some(call) = state.calls.get_mut(&id) else {
                return;
            };
            let Stage::InService { result, .. } = call.stage else {
                return;
            };
            let abandoned = call.abandoned;
            let waker = call.waker.take();
            if abandoned {
                state.calls.remove(&id);
            } else {
                call.stage = Stage::Done(result);
            }
            match result {
                Ok(_) => state.stats.succeeded += 1,
                Err(_) => state.stats.failed += 1,
            }
            state.in_service -= 1;
            (waker, self.start_queued(state))
        };
        for start in starts {
            self.arm(start);
        }
        if let Some(waker) = waker {
            waker.wake();
        }
    }

    /// The workers serving now: the last phase covering now that sets them, else the
    /// backend's own.
    fn workers_now(&self) -> usize {
        let now = self.shared.clock.now_ms();
        self.shared
            .phases
            .iter()
            .rev()
            .filter(|phase| phase.covers(now))
            .find_map(|phase| phase.workers)
            .unwrap_or(self.shared.workers)
    }

    /// A change of workers (a phase's boundary): queued calls start in the free ones.
    fn start_waiting(&self) {
        let starts = {
            let mut guard = self.shared.state.lock();
            self.start_queued(&mut guard)
        };
        for start in starts {
            self.arm(start);
        }
    }

    /// Moves queued calls into free workers; returns the services to arm.
    fn start_queued(&self, state: &mut State) -> Vec<Start> {
        let mut starts = Vec::new();
        let workers = self.workers_now();
        while state.in_service < workers {
            let Some(id) = state.queued.pop_front() else {
                break;
            };
            let (start, stage) = self.begin_service(state, id);
            if let Some(call) = state.calls.get_mut(&id) {
                call.stage = stage;
            }
            starts.push(start);
        }
        starts
    }

    /// The caller of call `id` went away before taking its result.
    fn abandon(&self, id: u64) {
        let (cancel, starts) = {
            let mut guard = self.shared.state.lock();
            let state = &mut *guard;
            let Some(call) = state.calls.get_mut(&id) else {
                return;
            };
            match call.stage {
                Stage::Done(_) => {
                    state.calls.remove(&id);
                    return;
                }
                Stage::Queued => {
                    state.calls.remove(&id);
                    state.queued.retain(|queued| *queued != id);
                    state.stats.abandoned_queued += 1;
                    return;
                }
                Stage::InService { timer, .. } => {
                    state.stats.abandoned_in_service += 1;
                    if self.shared.stops_abandoned_work {
                        state.calls.remove(&id);
                        state.in_service -= 1;
                        (timer, self.start_queued(state))
                    } else {
                        call.abandoned = true;
                        call.waker = None;
                        return;
                    }
                }
            }
        };
        if let Some(timer) = cancel {
            self.shared.clock.cancel(timer);
        }
        for start in starts {
            self.arm(start);
        }
    }

    /// Polls call `id`: its result once its service has ended.
    fn poll_call(&self, id: u64, waker: &Waker) -> Poll<Result<SimOutcome, BackendError>> {
        let mut guard = self.shared.state.lock();
        let state = &mut *guard;
        let Some(call) = state.calls.get_mut(&id) else {
            // Unreachable while the caller holds the id; answer rather than hang.
            return Poll::Ready(Err(BackendError::Failed));
        };
        if let Stage::Done(result) = call.stage {
            state.calls.remove(&id);
            return Poll::Ready(result);
        }
        match &mut call.waker {
            Some(current) if current.will_wake(waker) => {}
            slot => *slot = Some(waker.clone()),
        }
        Poll::Pending
    }
}

impl fmt::Debug for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("Backend")
            .field("workers", &self.shared.workers)
            .field("queue", &self.shared.queue)
            .field("in_service", &state.in_service)
            .field("queued", &state.queued.len())
            .field("stats", &state.stats)
            .finish_non_exhaustive()
    }
}

/// The future of [`Backend::call`]: reaches the backend at its first poll and resolves when its
/// service ends (at once when refused). Dropping it before then abandons the call. Like an
/// `async fn`'s future, it panics if polled again after it resolved.
#[must_use = "a backend call does nothing unless polled or awaited"]
pub struct BackendCall {
    backend: Backend,
    /// Set at the first poll, when the backend took the call.
    id: Option<u64>,
    done: bool,
}

impl Future for BackendCall {
    type Output = Result<SimOutcome, BackendError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // As an `async fn`'s future: polling again after the result is a caller's bug.
        assert!(!self.done, "BackendCall polled after it completed");
        let id = match self.id {
            Some(id) => id,
            None => match self.backend.arrive(cx.waker()) {
                Ok(id) => {
                    self.id = Some(id);
                    id
                }
                Err(refused) => {
                    self.done = true;
                    return Poll::Ready(Err(refused));
                }
            },
        };
        let polled = self.backend.poll_call(id, cx.waker());
        if polled.is_ready() {
            self.done = true;
        }
        polled
    }
}

impl Drop for BackendCall {
    fn drop(&mut self) {
        if let (Some(id), false) = (self.id, self.done) {
            self.backend.abandon(id);
        }
    }
}

impl fmt::Debug for BackendCall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendCall")
            .field("id", &self.id)
            .field("done", &self.done)
            .finish_non_exhaustive()
    }
}
