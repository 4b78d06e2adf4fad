//! The cloud circuit-breaker pattern on top of Hystrix's breaker (SPEC Part A 8, 23, 28, Part
//! C), with exact values on the manual clock: trip-now with a minimum open time (Retry-After),
//! open-duration backoff, health probes, the shared state store, keyed breakers, the journal
//! and replay, and dry-run mode.
//!
//! Defaults unless a test says otherwise: health buckets of 500 ms, 20 requests, 50 %, a
//! 5000 ms sleep window, one trial. Work that runs on the registry's executor (probes, replay)
//! is awaited by its observable effect, with a real-time bound only as a safety net.

#![allow(clippy::unwrap_used)]

mod common;

use std::num::{NonZeroU32, NonZeroUsize};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use common::{BreakerEvents, DependencyError, builder, names};
use futures::executor::block_on;
use hystrix::circuit::journal::{JournalConfig, JournalCounts};
use hystrix::circuit::store::{
    ChangeListener, HealthDelta, InMemoryStateStore, SharedStatus, SharedView, StateStore,
    StoreFuture,
};
use hystrix::circuit::{Backoff, HealthProbe};
use hystrix::clock::{Clock, ManualClock};
use hystrix::{Class, Command, CommandKey, EventType, FailureType, HystrixError, Registry, Status};

fn ok() -> Result<u32, DependencyError> {
    Ok(1)
}

fn boom() -> Result<u32, DependencyError> {
    Err(DependencyError("boom"))
}

/// A registry on its own manual clock, with its breaker events recorded.
fn registry() -> (Registry, ManualClock, BreakerEvents) {
    let clock = ManualClock::new();
    let events = BreakerEvents::default();
    let registry = Registry::builder()
        .clock(clock.clone())
        .circuit_breaker_listener(events.clone())
        .build();
    (registry, clock, events)
}

/// 20 failures now, then the end of their health bucket: the breaker trips.
fn trip(cmd: &Command, clock: &ManualClock) {
    for _ in 0..20 {
        cmd.run(boom).execute().unwrap_err();
    }
    let now = clock.now_ms();
    clock.advance_ms(500 - now % 500);
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
}

fn advance_to(clock: &ManualClock, ms: u64) {
    let now = clock.now_ms();
    assert!(ms >= now, "time goes forward only");
    clock.advance_ms(ms - now);
}

fn short_circuited(cmd: &Command) -> bool {
    cmd.run(ok).execute().unwrap_err().failure_type() == FailureType::ShortCircuit
}

/// Waits (up to 5 s of real time, as a safety net) for work on the executor to show.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::yield_now();
    }
}

// ------------------------------------------------------------------------------------------------
// Trip now (accelerated tripping)

/// An HTTP error as a client would return it.
#[derive(Debug)]
struct HttpError {
    status: u16,
    retry_after: Option<&'static str>,
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HTTP {}", self.status)
    }
}

impl std::error::Error for HttpError {}

fn classify_http(err: &HttpError) -> Class {
    match (err.status, err.retry_after) {
        (404, _) => Class::Ignored,
        (400, _) => Class::BadRequest,
        (503, Some(value)) => Class::TripNow {
            min_open: hystrix::http::retry_after(value, SystemTime::now()),
        },
        _ => Class::Failure,
    }
}

#[test]
fn a_503_with_retry_after_30_s_keeps_the_breaker_open_30_s_despite_a_5_s_sleep_window() {
    let (registry, clock, events) = registry();
    let cmd = builder("Catalog")
        .classify(classify_http)
        .build_in(&registry)
        .unwrap();
    let unavailable = || {
        Err::<u32, _>(HttpError {
            status: 503,
            retry_after: Some("30"),
        })
    };
    let outcome = cmd.run(unavailable).execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["FAILURE", "FALLBACK_MISSING"]
    );
    let err = outcome.response().as_ref().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    // One error opened it at once, with no request volume and no health bucket.
    let breaker = cmd.circuit_breaker();
    assert_eq!(breaker.status(), Status::Open);
    assert_eq!(breaker.open_duration_ms(), Some(30_000));
    assert_eq!(
        events.take(),
        [
            "Catalog opened for 30000 ms: the error asked to trip now and stay open at least 30000 ms"
        ]
    );
    let ok = || Ok::<u32, HttpError>(7);
    advance_to(&clock, 5001);
    assert_eq!(
        cmd.run(ok).execute().unwrap_err().failure_type(),
        FailureType::ShortCircuit
    );
    advance_to(&clock, 30_000);
    assert_eq!(
        cmd.run(ok).execute().unwrap_err().failure_type(),
        FailureType::ShortCircuit
    );
    // Strictly after 30 s: the trial, whose success closes it.
    advance_to(&clock, 30_001);
    assert_eq!(cmd.run(ok).execute().unwrap(), 7);
    assert_eq!(breaker.status(), Status::Closed);
    assert_eq!(breaker.open_duration_ms(), None);
    assert_eq!(events.take(), ["Catalog half-open", "Catalog closed"]);
}

#[test]
fn a_trip_now_without_a_time_opens_for_the_sleep_window_and_a_failed_trial_can_trip_now_again() {
    let (registry, clock, events) = registry();
    let cmd = builder("Search")
        .classify(|_: &HttpError| Class::TripNow { min_open: None })
        .build_in(&registry)
        .unwrap();
    let fail = || {
        Err::<u32, _>(HttpError {
            status: 503,
            retry_after: None,
        })
    };
    cmd.run(fail).execute().unwrap_err();
    assert_eq!(cmd.circuit_breaker().open_duration_ms(), Some(5000));
    advance_to(&clock, 5001);
    cmd.run(fail).execute().unwrap_err();
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    assert_eq!(cmd.circuit_breaker().reopens(), 1);
    assert_eq!(
        events.take(),
        [
            "Search opened for 5000 ms: the error asked to trip now",
            "Search half-open",
            "Search opened for 5000 ms: the error asked to trip now",
        ]
    );
}

#[test]
fn every_class_has_its_event_and_shows_in_the_metrics() {
    let (registry, clock, _) = registry();
    let cmd = builder("Classes")
        .classify(classify_http)
        .build_in(&registry)
        .unwrap();
    let with = |status, retry_after| {
        move || {
            Err::<u32, _>(HttpError {
                status,
                retry_after,
            })
        }
    };
    assert_eq!(
        cmd.run(with(404, None))
            .execute()
            .unwrap_err()
            .failure_type(),
        FailureType::Ignored
    );
    assert_eq!(
        cmd.run(with(400, None))
            .execute()
            .unwrap_err()
            .failure_type(),
        FailureType::BadRequest
    );
    assert_eq!(
        cmd.run(with(500, None))
            .execute()
            .unwrap_err()
            .failure_type(),
        FailureType::CommandException
    );
    assert_eq!(
        cmd.run(with(503, Some("2")))
            .execute()
            .unwrap_err()
            .failure_type(),
        FailureType::CommandException
    );
    clock.advance_ms(1000);
    let metrics = cmd.metrics();
    assert_eq!(metrics.rolling_count(EventType::Ignored), 1);
    assert_eq!(metrics.rolling_count(EventType::BadRequest), 1);
    // TRIP_NOW is a FAILURE plus the trip (SPEC Part A 23).
    assert_eq!(metrics.rolling_count(EventType::Failure), 2);
    assert_eq!(metrics.circuit_open_duration_ms(), Some(5000));
}

// ------------------------------------------------------------------------------------------------
// Open-duration backoff

/// With the constant default, an opening lasts the sleep window as it is now: a change of
/// `circuitBreaker.sleepWindowInMilliseconds` while OPEN applies to the opening under way.
#[test]
fn with_the_constant_backoff_a_sleep_window_changed_while_open_applies_at_once() {
    let (registry, clock, _) = registry();
    let cmd = builder("Constant").build_in(&registry).unwrap();
    trip(&cmd, &clock); // opened at 500 ms
    let breaker = cmd.circuit_breaker();
    assert_eq!(breaker.open_duration_ms(), Some(5000));
    registry
        .properties()
        .set(
            "hystrix.command.Constant.circuitBreaker.sleepWindowInMilliseconds",
            1000,
        )
        .unwrap();
    assert_eq!(breaker.open_duration_ms(), Some(1000));
    advance_to(&clock, 1500);
    assert!(
        short_circuited(&cmd),
        "still open at the end of the new window"
    );
    advance_to(&clock, 1501);
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    assert_eq!(breaker.status(), Status::Closed);
}

/// The multiplier must be at least 1: exactly 1 is valid, just below is refused.
#[test]
fn an_exponential_backoff_multiplier_of_1_is_valid_and_below_1_is_refused() {
    assert!(Backoff::exponential(1.0, Duration::from_secs(60)).is_ok());
    let err = Backoff::exponential(0.99, Duration::from_secs(60)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid value `0.99` for `circuitBreaker.backoff.multiplier`: must be a finite number \
         of at least 1"
    );
}

#[test]
fn exponential_backoff_grows_with_each_reopen_up_to_its_cap_and_resets_when_closed() {
    let (registry, clock, events) = registry();
    let cmd = builder("Backoff")
        .open_backoff(Backoff::exponential(2.0, Duration::from_secs(20)).unwrap())
        .build_in(&registry)
        .unwrap();
    trip(&cmd, &clock);
    let breaker = cmd.circuit_breaker();
    let mut durations = vec![breaker.open_duration_ms().unwrap()];
    // Each failed trial re-opens it for twice as long, up to 20 s.
    for _ in 0..4 {
        let until = clock.now_ms() + breaker.open_duration_ms().unwrap();
        advance_to(&clock, until);
        assert!(
            short_circuited(&cmd),
            "still open at the end of its duration"
        );
        clock.advance_ms(1);
        cmd.run(boom).execute().unwrap_err();
        durations.push(breaker.open_duration_ms().unwrap());
    }
    assert_eq!(durations, [5000, 10_000, 20_000, 20_000, 20_000]);
    assert_eq!(breaker.reopens(), 4);
    assert_eq!(cmd.metrics().circuit_open_duration_ms(), Some(20_000));
    // A successful trial closes it; the next opening starts from the sleep window again.
    clock.advance_ms(20_001);
    cmd.run(ok).execute().unwrap();
    assert_eq!(breaker.status(), Status::Closed);
    assert_eq!(breaker.reopens(), 0);
    trip(&cmd, &clock);
    assert_eq!(breaker.open_duration_ms(), Some(5000));
    let opened: Vec<String> = events
        .take()
        .into_iter()
        .filter(|event| event.contains("opened for"))
        .map(|event| event.split(':').next().unwrap().to_owned())
        .collect();
    assert_eq!(
        opened,
        [
            "Backoff opened for 5000 ms",
            "Backoff opened for 10000 ms",
            "Backoff opened for 20000 ms",
            "Backoff opened for 20000 ms",
            "Backoff opened for 20000 ms",
            "Backoff opened for 5000 ms",
        ]
    );
}

#[test]
fn a_custom_backoff_sees_the_reopens_and_the_trigger() {
    let (registry, clock, _) = registry();
    let cmd = builder("Custom")
        .open_backoff(Backoff::custom(|ctx| {
            Duration::from_millis(1000 * (u64::from(ctx.reopens) + 1))
        }))
        .build_in(&registry)
        .unwrap();
    trip(&cmd, &clock);
    assert_eq!(cmd.circuit_breaker().open_duration_ms(), Some(1000));
    clock.advance_ms(1001);
    cmd.run(boom).execute().unwrap_err();
    assert_eq!(cmd.circuit_breaker().open_duration_ms(), Some(2000));
}

// ------------------------------------------------------------------------------------------------
// Health probes

#[test]
fn a_healthy_probe_moves_the_breaker_to_half_open_before_the_sleep_window_ends() {
    let (registry, clock, events) = registry();
    let healthy = Arc::new(AtomicBool::new(false));
    let probe = {
        let healthy = Arc::clone(&healthy);
        HealthProbe::blocking(
            move || healthy.load(Ordering::SeqCst),
            Duration::from_secs(1),
        )
        .unwrap()
        .timeout(Duration::from_millis(300))
        .unwrap()
    };
    let cmd = builder("Probed")
        .health_probe(probe)
        .build_in(&registry)
        .unwrap();
    trip(&cmd, &clock); // opened at 500 ms
    events.take();
    // At 1500 ms the probe runs (its timeout at 1800 ms) and answers unhealthy: the next one
    // is due at 2500 ms.
    advance_to(&clock, 1500);
    wait_for("the second probe to be scheduled", || {
        clock.next_timer_deadline_ms() == Some(2500)
    });
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    healthy.store(true, Ordering::SeqCst);
    advance_to(&clock, 2500);
    // The event follows the transition, on the executor's thread.
    wait_for("the probe to half-open the breaker", || {
        events.0.lock().unwrap().len() == 1
    });
    assert_eq!(cmd.circuit_breaker().status(), Status::HalfOpen);
    assert_eq!(events.take(), ["Probed half-open by probe"]);
    // 2000 ms after opening, well within the 5000 ms sleep window: a trial is admitted.
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
}

/// Without `instead_of_sleep_window`, the sleep window still half-opens the breaker: a probe
/// not yet due leaves the trial to the next execution after the window.
#[test]
fn with_a_probe_beside_the_sleep_window_a_trial_still_runs_after_the_window() {
    let (registry, clock, _) = registry();
    let probe = HealthProbe::blocking(|| false, Duration::from_secs(10)).unwrap();
    let cmd = builder("Beside")
        .health_probe(probe)
        .build_in(&registry)
        .unwrap();
    trip(&cmd, &clock); // opened at 500 ms; the first probe is due at 10 500 ms
    advance_to(&clock, 5500);
    assert!(short_circuited(&cmd));
    advance_to(&clock, 5501);
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
}

/// Each opening has its own chain of probes; a re-opening ends the chain of the opening before
/// (its next probe is not run), so the probes keep their pace.
#[test]
fn a_reopening_ends_the_probes_of_the_opening_before() {
    let (registry, clock, _) = registry();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let probe = {
        let calls = Arc::clone(&calls);
        HealthProbe::blocking(
            move || {
                calls.fetch_add(1, Ordering::SeqCst);
                false
            },
            Duration::from_secs(1),
        )
        .unwrap()
        // Short: its deadline timer is never taken for the next probe's.
        .timeout(Duration::from_millis(100))
        .unwrap()
    };
    let cmd = builder("Chains")
        .health_probe(probe)
        .build_in(&registry)
        .unwrap();
    trip(&cmd, &clock); // opened at 500 ms, until 5500
    for (due, probes) in [(1500, 1), (2500, 2), (3500, 3), (4500, 4), (5500, 5)] {
        advance_to(&clock, due);
        wait_for("the probe and the next one's timer", || {
            calls.load(Ordering::SeqCst) == probes
                && clock.next_timer_deadline_ms() == Some(due + 1000)
        });
    }
    // A failed trial at 5501 re-opens it: a new chain, its first probe due at 6501.
    advance_to(&clock, 5501);
    cmd.run(boom).execute().unwrap_err();
    assert_eq!(cmd.circuit_breaker().reopens(), 1);
    // 6500, the old chain's time: nothing runs. (A probe started wrongly would run on another
    // thread: 200 ms of real time lets it show; the right code passes whatever the wait.)
    advance_to(&clock, 6500);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(calls.load(Ordering::SeqCst), 5);
    assert_eq!(clock.next_timer_deadline_ms(), Some(6501));
    advance_to(&clock, 6501);
    wait_for("the new chain's probe and its next timer", || {
        calls.load(Ordering::SeqCst) == 6 && clock.next_timer_deadline_ms() == Some(7501)
    });
}

/// At most `max_concurrent` probes at once (1 by default): a blocking probe still stuck past
/// its timeout keeps its place, so the next due probe is skipped, not started beside it.
#[test]
fn a_stuck_blocking_probe_keeps_its_place_and_the_next_one_is_skipped() {
    let (registry, clock, _) = registry();
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let release = Arc::new(AtomicBool::new(false));
    let probe = {
        let (calls, release) = (Arc::clone(&calls), Arc::clone(&release));
        HealthProbe::blocking(
            move || {
                calls.fetch_add(1, Ordering::SeqCst);
                while !release.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
                false
            },
            Duration::from_secs(1),
        )
        .unwrap()
        .timeout(Duration::from_millis(200))
        .unwrap()
    };
    let cmd = builder("Stuck")
        .health_probe(probe)
        .build_in(&registry)
        .unwrap();
    trip(&cmd, &clock); // opened at 500 ms
    advance_to(&clock, 1500); // the probe starts and sticks
    wait_for("the probe to start", || calls.load(Ordering::SeqCst) == 1);
    wait_for("the probe's timeout timer", || {
        clock.next_timer_deadline_ms() == Some(1700)
    });
    advance_to(&clock, 1700); // its timeout: unhealthy, the next probe due at 2700 ms
    wait_for("the next probe", || {
        clock.next_timer_deadline_ms() == Some(2700)
    });
    advance_to(&clock, 2700); // the first still runs: skipped, due again at 3700 ms
    wait_for("the probe after", || {
        clock.next_timer_deadline_ms() == Some(3700)
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    release.store(true, Ordering::SeqCst);
}

#[test]
fn a_probe_that_hangs_past_its_timeout_counts_as_unhealthy_and_only_the_probe_may_half_open() {
    let (registry, clock, _) = registry();
    let answer = Arc::new(AtomicBool::new(false));
    let hang = Arc::new(AtomicBool::new(true));
    let probe = {
        let (answer, hang) = (Arc::clone(&answer), Arc::clone(&hang));
        HealthProbe::new_async(
            move || {
                let (answer, hang) = (Arc::clone(&answer), Arc::clone(&hang));
                async move {
                    if hang.load(Ordering::SeqCst) {
                        std::future::pending::<()>().await;
                    }
                    answer.load(Ordering::SeqCst)
                }
            },
            Duration::from_secs(1),
        )
        .unwrap()
        .timeout(Duration::from_millis(200))
        .unwrap()
        .max_concurrent(NonZeroU32::new(1).unwrap())
        .instead_of_sleep_window()
    };
    let cmd = builder("Hanging")
        .health_probe(probe)
        .build_in(&registry)
        .unwrap();
    trip(&cmd, &clock); // opened at 500 ms
    advance_to(&clock, 1500); // the probe starts and hangs
    wait_for("the probe's timeout timer", || {
        clock.next_timer_deadline_ms() == Some(1700)
    });
    advance_to(&clock, 1700); // its timeout: unhealthy, the next probe at 2700 ms
    wait_for("the next probe", || {
        clock.next_timer_deadline_ms() == Some(2700)
    });
    // From now on the probe answers at once, unhealthy: one probe a second.
    hang.store(false, Ordering::SeqCst);
    for due in [2700, 3700, 4700, 5700] {
        advance_to(&clock, due);
        wait_for("the next probe", || {
            clock.next_timer_deadline_ms() == Some(due + 1000)
        });
    }
    // Past the sleep window (5500 ms) the breaker stays OPEN: only a probe may move it.
    assert!(short_circuited(&cmd));
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    answer.store(true, Ordering::SeqCst);
    advance_to(&clock, 6700);
    wait_for("a healthy probe", || {
        cmd.circuit_breaker().status() == Status::HalfOpen
    });
}

// ------------------------------------------------------------------------------------------------
// Shared state store

/// Two instances (registries) sharing one in-memory store and one manual clock; rounds run
/// only when the test asks.
fn two_instances() -> (
    Registry,
    Registry,
    InMemoryStateStore,
    ManualClock,
    BreakerEvents,
) {
    let clock = ManualClock::new();
    let store = InMemoryStateStore::new(Arc::new(clock.clone()));
    let events = BreakerEvents::default();
    let instance = |name: &str| {
        Registry::builder()
            .clock(clock.clone())
            .state_store(store.clone())
            .state_store_sync_interval(None)
            .instance_id(name)
            .circuit_breaker_listener(events.clone())
            .build()
    };
    (instance("a"), instance("b"), store, clock, events)
}

fn shared(registry: &Registry) -> Command {
    builder("Shared")
        .shared_state(true)
        .build_in(registry)
        .unwrap()
}

#[test]
fn a_trip_on_one_instance_opens_the_others_but_their_views_never_close_a_local_trip() {
    let (a, b, store, clock, events) = two_instances();
    let (cmd_a, cmd_b) = (shared(&a), shared(&b));
    trip(&cmd_a, &clock); // A opened at 500 ms
    block_on(a.sync_state_store());
    assert_eq!(
        store.view_now("Shared").status,
        SharedStatus::Open { remaining_ms: 5000 }
    );
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Closed);
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Open);
    assert!(short_circuited(&cmd_b));
    assert_eq!(cmd_b.circuit_breaker().open_duration_ms(), Some(5000));
    let trip_cause = cmd_b.circuit_breaker().trip_cause().unwrap().to_string();
    assert!(trip_cause.contains("shared state store"), "{trip_cause}");
    events.take();

    // The shared view of a closed dependency never closes a breaker that tripped locally.
    let c = {
        let clock = clock.clone();
        Registry::builder()
            .clock(clock)
            .state_store(store.clone())
            .state_store_sync_interval(None)
            .instance_id("c")
            .build()
    };
    let other = builder("Other").shared_state(true).build_in(&c).unwrap();
    trip(&other, &clock);
    // Its trip is not published yet; the store says Closed.
    assert_eq!(store.view_now("Other").status, SharedStatus::Closed);
    let before = store.calls();
    block_on(c.sync_state_store());
    assert!(store.calls() > before);
    assert_eq!(other.circuit_breaker().status(), Status::Open);
    assert!(matches!(
        store.view_now("Other").status,
        SharedStatus::Open { .. }
    ));
}

#[test]
fn a_published_close_closes_only_breakers_past_their_own_open_duration() {
    let (a, b, store, clock, events) = two_instances();
    let (cmd_a, cmd_b) = (shared(&a), shared(&b));
    trip(&cmd_a, &clock); // A opened at 500 ms, until 5500
    block_on(a.sync_state_store());
    advance_to(&clock, 3500);
    trip(&cmd_b, &clock); // B tripped on its own at 4000 ms, until 9000
    block_on(b.sync_state_store());
    events.take();

    // Past A's window, A's round gets the probe permit; its trial closes it; the close is
    // published.
    advance_to(&clock, 5501);
    assert!(
        short_circuited(&cmd_a),
        "no trial without the store's permit"
    );
    block_on(a.sync_state_store());
    assert_eq!(cmd_a.run(ok).execute().unwrap(), 1);
    assert_eq!(cmd_a.circuit_breaker().status(), Status::Closed);
    block_on(a.sync_state_store());
    assert_eq!(store.view_now("Shared").status, SharedStatus::Closed);
    // B is within its own window (until 9000 ms): the published close does not close it.
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Open);
    assert!(short_circuited(&cmd_b));
    // Past its window, B asks for the permit and sends its own trial.
    advance_to(&clock, 9001);
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.run(ok).execute().unwrap(), 1);
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Closed);
    assert_eq!(
        events.take(),
        [
            "Shared half-open",
            "Shared closed",
            "Shared half-open",
            "Shared closed"
        ]
    );
}

/// The last ms of a breaker's own open duration is still within it: a published close seen
/// then leaves it open, as its own trials would wait; 1 ms later it sends its own trial.
#[test]
fn a_published_close_seen_at_the_last_ms_of_the_own_open_duration_leaves_it_open() {
    let (a, b, store, clock, events) = two_instances();
    let (cmd_a, cmd_b) = (shared(&a), shared(&b));
    trip(&cmd_a, &clock); // A opened at 500 ms, until 5500
    block_on(a.sync_state_store());
    advance_to(&clock, 3500);
    trip(&cmd_b, &clock); // B tripped on its own at 4000 ms, until 9000
    block_on(b.sync_state_store());
    advance_to(&clock, 5501);
    block_on(a.sync_state_store());
    assert_eq!(cmd_a.run(ok).execute().unwrap(), 1);
    block_on(a.sync_state_store());
    assert_eq!(store.view_now("Shared").status, SharedStatus::Closed);
    events.take();
    // B's first look at the store since the close: at 9000 ms.
    advance_to(&clock, 9000);
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Open);
    assert!(short_circuited(&cmd_b));
    advance_to(&clock, 9001);
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.run(ok).execute().unwrap(), 1);
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Closed);
    assert_eq!(events.take(), ["Shared half-open", "Shared closed"]);
}

#[test]
fn a_published_close_closes_a_breaker_whose_own_window_has_passed() {
    let (a, b, _store, clock, events) = two_instances();
    let (cmd_a, cmd_b) = (shared(&a), shared(&b));
    trip(&cmd_a, &clock); // opened at 500 ms
    block_on(a.sync_state_store());
    block_on(b.sync_state_store()); // B opened from the store, until 5500 ms
    advance_to(&clock, 5501);
    block_on(a.sync_state_store()); // A has the permit
    block_on(b.sync_state_store()); // B does not
    assert!(
        short_circuited(&cmd_b),
        "B is past its window but has no permit"
    );
    cmd_a.run(ok).execute().unwrap();
    block_on(a.sync_state_store());
    events.take();
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Closed);
    assert_eq!(events.take(), ["Shared closed by store"]);
    assert_eq!(cmd_b.run(ok).execute().unwrap(), 1);
}

/// A shared command whose every error trips it now (for a trip at an exact time).
fn shared_tripping_now(registry: &Registry) -> Command<hystrix::Classifier<HttpError>> {
    builder("Shared")
        .shared_state(true)
        .classify(|_: &HttpError| Class::TripNow { min_open: None })
        .build_in(registry)
        .unwrap()
}

#[test]
fn a_late_joiner_opens_for_what_is_left_of_the_shared_period_and_follows_the_close() {
    let (a, b, store, clock, events) = two_instances();
    let (cmd_a, cmd_b) = (shared_tripping_now(&a), shared_tripping_now(&b));
    let fail = || {
        Err::<u32, _>(HttpError {
            status: 503,
            retry_after: None,
        })
    };
    let ok = || Ok::<u32, HttpError>(1);
    let short_circuited = |cmd: &Command<hystrix::Classifier<HttpError>>| {
        cmd.run(ok).execute().unwrap_err().failure_type() == FailureType::ShortCircuit
    };
    // A trips at 100 ms for its 5000 ms sleep window (until 5100) and publishes it.
    advance_to(&clock, 100);
    cmd_a.run(fail).execute().unwrap_err();
    assert_eq!(cmd_a.circuit_breaker().open_duration_ms(), Some(5000));
    block_on(a.sync_state_store());
    assert_eq!(
        store.view_now("Shared").status,
        SharedStatus::Open { remaining_ms: 5000 }
    );
    // B joins at 3000 ms: it opens for the 2100 ms left of the shared period (until 5100),
    // never for a fresh sleep window.
    advance_to(&clock, 3000);
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Open);
    assert_eq!(cmd_b.circuit_breaker().open_duration_ms(), Some(2100));
    assert!(short_circuited(&cmd_b));
    advance_to(&clock, 5100);
    assert!(short_circuited(&cmd_b));
    events.take();
    // At 5101 A's round takes the probe permit, its trial closes A, and the close is published.
    advance_to(&clock, 5101);
    block_on(a.sync_state_store());
    assert_eq!(cmd_a.run(ok).execute().unwrap(), 1);
    assert_eq!(cmd_a.circuit_breaker().status(), Status::Closed);
    block_on(a.sync_state_store());
    assert_eq!(store.view_now("Shared").status, SharedStatus::Closed);
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Open);
    // B's next round, at 5200, is past its own open period: it follows the published close.
    advance_to(&clock, 5200);
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Closed);
    assert_eq!(cmd_b.run(ok).execute().unwrap(), 1);
    assert_eq!(
        events.take(),
        [
            "Shared half-open",
            "Shared closed",
            "Shared closed by store"
        ]
    );
}

#[test]
fn store_errors_are_counted_and_the_breaker_goes_on_with_local_state() {
    let (a, _b, store, clock, _) = two_instances();
    let cmd = shared(&a);
    store.set_unavailable(true);
    trip(&cmd, &clock);
    block_on(a.sync_state_store());
    let status = a.state_store_status().unwrap();
    assert!(status.errors_total >= 1, "{status:?}");
    assert!(status.degraded);
    assert_eq!(status.rounds, 1);
    // Degraded: past the sleep window the trial goes ahead without the store's permit.
    advance_to(&clock, 5501);
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    // The store comes back: the next round succeeds and clears the flag.
    store.set_unavailable(false);
    block_on(a.sync_state_store());
    let status = a.state_store_status().unwrap();
    assert!(!status.degraded);
    assert_eq!(status.rounds, 2);
}

#[test]
fn when_the_periodic_rounds_stop_the_breaker_decides_alone_and_is_never_stuck_open() {
    let clock = ManualClock::new();
    let store = InMemoryStateStore::new(Arc::new(clock.clone()));
    let registry = Registry::builder()
        .clock(clock.clone())
        .state_store(store.clone())
        .state_store_sync_interval(Some(Duration::from_millis(500)))
        .build();
    let cmd = shared(&registry);
    // The first round runs on the executor when the clock reaches 500 ms.
    clock.advance_ms(500);
    wait_for("the first round", || {
        registry.state_store_status().unwrap().rounds >= 1
    });
    trip(&cmd, &clock); // opened at 1000 ms
    // The executor goes away: no more rounds, so no probe permit will ever come.
    registry.shutdown();
    let rounds = registry.state_store_status().unwrap().rounds;
    // Past the sleep window and more than 3 intervals + the store timeout after the last
    // round, the breaker sends its trial on local state alone.
    advance_to(&clock, 6001);
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    assert_eq!(registry.state_store_status().unwrap().rounds, rounds);
}

#[test]
fn counts_are_published_and_a_command_without_a_store_is_refused() {
    let (a, _b, store, _clock, _) = two_instances();
    let cmd = shared(&a);
    for _ in 0..3 {
        cmd.run(ok).execute().unwrap();
    }
    cmd.run(boom).execute().unwrap_err();
    block_on(a.sync_state_store());
    let view = store.view_now("Shared");
    assert_eq!((view.requests, view.errors, view.reporters), (4, 1, 1));
    // Nothing new: nothing published twice.
    block_on(a.sync_state_store());
    assert_eq!(store.view_now("Shared").requests, 4);

    let err = builder("Lonely")
        .shared_state(true)
        .build_in(&Registry::new())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("hystrix.command.Lonely.sharedState"),
        "{err}"
    );
}

/// Two instances as [`two_instances`], publishing a local trip only once the shared view
/// counts `min_reporters` distinct reporters.
fn two_instances_needing(
    min_reporters: u32,
) -> (Registry, Registry, InMemoryStateStore, ManualClock) {
    let clock = ManualClock::new();
    let store = InMemoryStateStore::new(Arc::new(clock.clone()));
    let instance = |name: &str| {
        Registry::builder()
            .clock(clock.clone())
            .state_store(store.clone())
            .state_store_sync_interval(None)
            .state_store_min_reporters(NonZeroU32::new(min_reporters).unwrap())
            .instance_id(name)
            .build()
    };
    (instance("a"), instance("b"), store, clock)
}

#[test]
fn with_min_reporters_a_local_trip_waits_for_enough_reporting_instances() {
    let (a, b, store, clock) = two_instances_needing(2);
    let (cmd_a, cmd_b) = (shared(&a), shared(&b));
    trip(&cmd_a, &clock); // A opened at 500 ms, for itself
    block_on(a.sync_state_store());
    // One reporter (A): the trip is not shared, A stays open alone (OR semantics).
    let view = store.view_now("Shared");
    assert_eq!(
        (view.status, view.reporters, view.generation),
        (SharedStatus::Closed, 1, 0)
    );
    assert_eq!(cmd_a.circuit_breaker().status(), Status::Open);
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Closed);
    // Again: still one reporter, still pending, still not shared.
    block_on(a.sync_state_store());
    assert_eq!(store.view_now("Shared").status, SharedStatus::Closed);

    // B reports too: two reporters. A's next round publishes its pending trip; B follows.
    cmd_b.run(ok).execute().unwrap();
    block_on(b.sync_state_store());
    assert_eq!(store.view_now("Shared").reporters, 2);
    block_on(a.sync_state_store());
    let view = store.view_now("Shared");
    assert_eq!(
        (view.status, view.generation),
        (SharedStatus::Open { remaining_ms: 5000 }, 1)
    );
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Open);
}

#[test]
fn with_min_reporters_a_trip_that_closed_locally_is_never_published() {
    let (a, _b, store, clock) = two_instances_needing(2);
    let cmd_a = shared(&a);
    trip(&cmd_a, &clock); // opened at 500 ms, until 5500
    block_on(a.sync_state_store());
    // Degraded rounds let the trial go ahead without a permit; here the permit comes from the
    // store (shared Closed): the trial closes A, and the pending trip is dropped.
    advance_to(&clock, 5501);
    block_on(a.sync_state_store());
    assert_eq!(cmd_a.run(ok).execute().unwrap(), 1);
    assert_eq!(cmd_a.circuit_breaker().status(), Status::Closed);
    block_on(a.sync_state_store());
    let view = store.view_now("Shared");
    assert_eq!((view.status, view.generation), (SharedStatus::Closed, 0));
}

#[test]
fn with_min_reporters_a_trip_by_hand_is_published_at_once() {
    let (a, b, store, _clock) = two_instances_needing(3);
    let (cmd_a, cmd_b) = (shared(&a), shared(&b));
    cmd_a.circuit_breaker().force_open();
    block_on(a.sync_state_store());
    assert_eq!(
        store.view_now("Shared").status,
        SharedStatus::Open { remaining_ms: 5000 }
    );
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Open);
}

/// A store that records what the registry tells it beyond the five calls, in front of an
/// in-memory store.
#[derive(Clone, Default)]
struct Recording {
    fingerprints: Arc<parking_lot::Mutex<Vec<(String, String)>>>,
    listeners: Arc<parking_lot::Mutex<Vec<ChangeListener>>>,
}

struct RecordingStore {
    inner: InMemoryStateStore,
    seen: Recording,
}

impl StateStore for RecordingStore {
    fn publish<'a>(&'a self, deltas: &'a [HealthDelta]) -> StoreFuture<'a, ()> {
        self.inner.publish(deltas)
    }
    fn fetch<'a>(&'a self, command_key: &'a CommandKey) -> StoreFuture<'a, SharedView> {
        self.inner.fetch(command_key)
    }
    fn try_trip<'a>(
        &'a self,
        command_key: &'a CommandKey,
        generation: u64,
        open_for_ms: u64,
    ) -> StoreFuture<'a, Option<u64>> {
        self.inner.try_trip(command_key, generation, open_for_ms)
    }
    fn try_acquire_probe<'a>(
        &'a self,
        command_key: &'a CommandKey,
        instance: &'a str,
        ttl_ms: u64,
    ) -> StoreFuture<'a, bool> {
        self.inner.try_acquire_probe(command_key, instance, ttl_ms)
    }
    fn close<'a>(
        &'a self,
        command_key: &'a CommandKey,
        generation: u64,
    ) -> StoreFuture<'a, Option<u64>> {
        self.inner.close(command_key, generation)
    }
    fn watch(&self, listener: ChangeListener) {
        self.seen.listeners.lock().push(listener);
    }
    fn set_fingerprint(&self, command_key: &CommandKey, fingerprint: &str) {
        self.seen
            .fingerprints
            .lock()
            .push((command_key.to_string(), fingerprint.to_owned()));
    }
}

fn recording_registry(
    interval: Option<Duration>,
) -> (Registry, InMemoryStateStore, ManualClock, Recording) {
    let clock = ManualClock::new();
    let inner = InMemoryStateStore::new(Arc::new(clock.clone()));
    let seen = Recording::default();
    let registry = Registry::builder()
        .clock(clock.clone())
        .state_store(RecordingStore {
            inner: inner.clone(),
            seen: seen.clone(),
        })
        .state_store_sync_interval(interval)
        .build();
    (registry, inner, clock, seen)
}

#[test]
fn the_store_hears_each_commands_fingerprint_once_and_again_when_it_changes() {
    let (registry, _store, _clock, seen) = recording_registry(None);
    let _cmd = shared(&registry);
    block_on(registry.sync_state_store());
    block_on(registry.sync_state_store());
    assert_eq!(
        *seen.fingerprints.lock(),
        [(
            "Shared".to_owned(),
            "volume=20;error%=50;sleep=5000ms;window=10000ms;health=500ms;trials=1/1".to_owned()
        )]
    );
    registry
        .properties()
        .set(
            "hystrix.command.Shared.circuitBreaker.requestVolumeThreshold",
            5,
        )
        .unwrap();
    block_on(registry.sync_state_store());
    block_on(registry.sync_state_store());
    let fingerprints = seen.fingerprints.lock();
    assert_eq!(fingerprints.len(), 2);
    assert_eq!(
        fingerprints[1].1,
        "volume=5;error%=50;sleep=5000ms;window=10000ms;health=500ms;trials=1/1"
    );
}

#[test]
fn rounds_on_demand_only_never_subscribe_to_pushes() {
    let (registry, _store, _clock, seen) = recording_registry(None);
    let _cmd = shared(&registry);
    block_on(registry.sync_state_store());
    assert!(seen.listeners.lock().is_empty());
}

#[test]
fn a_push_from_the_store_runs_a_round_without_waiting_for_the_interval() {
    // A sync interval of an hour on a clock that never moves: only pushes run rounds.
    let (registry, _store, _clock, seen) = recording_registry(Some(Duration::from_secs(3600)));
    let _first = shared(&registry);
    let _second = builder("Second")
        .shared_state(true)
        .build_in(&registry)
        .unwrap();
    // Subscribed once, when the periodic rounds started.
    assert_eq!(seen.listeners.lock().len(), 1);
    assert_eq!(registry.state_store_status().unwrap().rounds, 0);
    let listener = Arc::clone(&seen.listeners.lock()[0]);
    assert!(listener());
    wait_for("the pushed round", || {
        registry.state_store_status().unwrap().rounds >= 1
    });
    // The registry is gone: the listener says so, and the store may drop it.
    drop((_first, _second, registry));
    assert!(!listener());
}

#[test]
fn a_local_trip_is_published_at_once_when_rounds_run_by_themselves() {
    let (registry, store, clock, _seen) = recording_registry(Some(Duration::from_secs(3600)));
    let cmd = shared(&registry);
    trip(&cmd, &clock);
    // No interval passed: the trip itself scheduled the round.
    wait_for("the trip in the store", || {
        matches!(store.view_now("Shared").status, SharedStatus::Open { .. })
    });
    // And the close of a successful trial too.
    advance_to(&clock, 5501);
    wait_for("the probe permit", || {
        block_on(registry.sync_state_store());
        cmd.run(ok).execute().is_ok()
    });
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    wait_for("the close in the store", || {
        store.view_now("Shared").status == SharedStatus::Closed
    });
}

// ------------------------------------------------------------------------------------------------
// Keyed breakers

#[test]
fn keyed_breakers_trip_one_key_alone() {
    let (registry, clock, events) = registry();
    let cmd = builder("PerHost")
        .breaker_per_key(NonZeroUsize::new(100).unwrap(), None)
        .build_in(&registry)
        .unwrap();
    for _ in 0..20 {
        cmd.run(boom)
            .breaker_key("down.example")
            .execute()
            .unwrap_err();
        cmd.run(ok).breaker_key("up.example").execute().unwrap();
    }
    clock.advance_ms(500);
    let down = cmd.keyed_circuit_breaker("down.example").unwrap();
    assert_eq!(down.status(), Status::Open);
    assert_eq!(down.breaker_key(), Some("down.example"));
    assert_eq!(down.health_counts().error_percentage, 100);
    let err = cmd
        .run(ok)
        .breaker_key("down.example")
        .execute()
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    assert_eq!(cmd.run(ok).breaker_key("up.example").execute().unwrap(), 1);
    // The command's own breaker judges only the calls it admits (none so far: keyed calls
    // stay out of its health window), while its metrics count every call.
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    clock.advance_ms(1000);
    assert_eq!(cmd.metrics().rolling_count(EventType::ShortCircuited), 1);
    assert_eq!(
        events.take(),
        [
            "PerHost/down.example opened for 5000 ms: 100% of 20 requests failed in the last 10000 ms (circuitBreaker.errorThresholdPercentage 50%); last failure: FAILURE"
        ]
    );
    // Its trial, after the sleep window, closes it.
    clock.advance_ms(5000);
    cmd.run(ok).breaker_key("down.example").execute().unwrap();
    assert_eq!(down.status(), Status::Closed);
}

#[test]
fn keyed_breakers_stay_bounded_under_100_000_keys_and_evict_idle_ones() {
    let (registry, clock, _) = registry();
    let cmd = builder("Tenants")
        .breaker_per_key(
            NonZeroUsize::new(1000).unwrap(),
            Some(Duration::from_secs(60)),
        )
        .build_in(&registry)
        .unwrap();
    for tenant in 0..100_000 {
        cmd.run(ok)
            .breaker_key(format!("tenant-{tenant}"))
            .execute()
            .unwrap();
    }
    assert_eq!(cmd.keyed_circuit_breaker_count(), 1000);
    let keys = cmd.keyed_circuit_breaker_keys();
    assert_eq!(&*keys[0], "tenant-99999");
    assert_eq!(&*keys[999], "tenant-99000");
    // Idle for more than a minute: the next use evicts the others.
    clock.advance_ms(60_001);
    cmd.run(ok).breaker_key("fresh").execute().unwrap();
    assert_eq!(cmd.keyed_circuit_breaker_count(), 1);
}

/// Runs `cmd` through the keyed breaker of `key`; returns whether the run reached the
/// dependency (it answers `answer`).
fn reaches(cmd: &Command, key: &str, answer: Result<u32, DependencyError>) -> bool {
    let reached = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&reached);
    let _ = cmd
        .run(move || {
            flag.store(true, Ordering::SeqCst);
            answer
        })
        .breaker_key(key)
        .execute();
    reached.load(Ordering::SeqCst)
}

fn keys_of<C>(cmd: &Command<C>) -> Vec<String> {
    let mut keys: Vec<String> = cmd
        .keyed_circuit_breaker_keys()
        .iter()
        .map(|key| key.to_string())
        .collect();
    keys.sort();
    keys
}

fn keyed_status<C>(cmd: &Command<C>, key: &str) -> Option<Status> {
    cmd.keyed_circuit_breaker(key)
        .map(|breaker| breaker.status())
}

#[test]
fn a_new_key_evicts_the_least_recently_used_closed_breaker_never_an_open_one() {
    let (registry, clock, _) = registry();
    let cmd = builder("Hosts")
        .breaker_per_key(NonZeroUsize::new(20).unwrap(), None)
        .build_in(&registry)
        .unwrap();
    // 17 sick hosts (the least recently used), then 3 healthy ones: the map is full.
    let sick: Vec<String> = (0..17).map(|i| format!("sick-{i:02}")).collect();
    for key in &sick {
        for _ in 0..20 {
            cmd.run(boom)
                .breaker_key(key.as_str())
                .execute()
                .unwrap_err();
        }
    }
    clock.advance_ms(500);
    for key in &sick {
        assert_eq!(keyed_status(&cmd, key), Some(Status::Open), "{key}");
    }
    for key in ["well-0", "well-1", "well-2"] {
        assert!(reaches(&cmd, key, ok()));
    }
    assert_eq!(cmd.keyed_circuit_breaker_count(), 20);
    // A new host: the least recently used CLOSED breaker makes room, not one of the 17 OPEN
    // ones (all less recently used).
    assert!(reaches(&cmd, "new", ok()));
    assert_eq!(cmd.keyed_circuit_breaker_count(), 20);
    let mut expected = sick.clone();
    expected.extend(["new".to_owned(), "well-1".to_owned(), "well-2".to_owned()]);
    expected.sort();
    assert_eq!(keys_of(&cmd), expected);
    // Every sick host is still short-circuited: its next call never reaches the dependency.
    for key in &sick {
        assert!(
            !reaches(&cmd, key, ok()),
            "{key} reached the sick dependency"
        );
    }
    // More new hosts keep evicting CLOSED breakers only.
    for i in 0..10 {
        assert!(reaches(&cmd, &format!("more-{i}"), ok()));
    }
    assert_eq!(cmd.keyed_circuit_breaker_count(), 20);
    for key in &sick {
        assert_eq!(keyed_status(&cmd, key), Some(Status::Open), "{key}");
    }
}

/// Found by a fresh user's trial: a keyed breaker whose failures trip it, but that nobody has
/// called or read since (its health is checked lazily), was evicted as CLOSED, so its next call
/// reached the sick dependency. Whether the map kept it depended on whether anyone had looked.
/// Failed before the fix: "sick" was evicted and its next call reached the dependency.
#[test]
fn a_closed_breaker_whose_health_trips_it_is_not_evicted_before_anyone_looks() {
    let (registry, clock, _) = registry();
    let cmd = builder("Lazy")
        .breaker_per_key(NonZeroUsize::new(2).unwrap(), None)
        .build_in(&registry)
        .unwrap();
    for _ in 0..20 {
        cmd.run(boom).breaker_key("sick").execute().unwrap_err();
    }
    // Its health window now holds 20 failures; it has not been called or read since.
    clock.advance_ms(600);
    assert!(reaches(&cmd, "a", ok()));
    assert!(reaches(&cmd, "b", ok()));
    // "a" made room, not "sick": the least recently used CLOSED breaker that does not trip.
    assert_eq!(keys_of(&cmd), ["b", "sick"]);
    assert!(!reaches(&cmd, "sick", ok()), "sick reached the dependency");
    assert_eq!(keyed_status(&cmd, "sick"), Some(Status::Open));
}

/// Every 503 trips now; with a Retry-After, for at least that long.
fn classify_503(err: &HttpError) -> Class {
    Class::TripNow {
        min_open: err
            .retry_after
            .and_then(|value| hystrix::http::retry_after(value, SystemTime::now())),
    }
}

fn unavailable(retry_after: Option<&'static str>) -> Result<u32, HttpError> {
    Err(HttpError {
        status: 503,
        retry_after,
    })
}

#[test]
fn an_idle_open_breaker_is_kept_until_its_open_period_lengthened_by_backoff_or_retry_after_ends() {
    let (registry, clock, _) = registry();
    let cmd = builder("Quiet")
        .classify(classify_503)
        .open_backoff(Backoff::exponential(2.0, Duration::from_secs(60)).unwrap())
        .breaker_per_key(NonZeroUsize::new(10).unwrap(), Some(Duration::from_secs(1)))
        .build_in(&registry)
        .unwrap();
    let call = |key: &str, answer: Result<u32, HttpError>| {
        cmd.run(move || answer).breaker_key(key).execute()
    };
    // At 0: "quota" answers 503 with Retry-After 30 s (open until 30 000); "flaky" a bare 503
    // (open for the 5000 ms sleep window).
    call("quota", unavailable(Some("30"))).unwrap_err();
    call("flaky", unavailable(None)).unwrap_err();
    // At 5001 flaky's trial fails: the backoff doubles its open period (until 15 001).
    advance_to(&clock, 5001);
    call("flaky", unavailable(None)).unwrap_err();
    let open_for = |key: &str| {
        cmd.keyed_circuit_breaker(key)
            .and_then(|breaker| breaker.open_duration_ms())
    };
    assert_eq!(open_for("flaky"), Some(10_000));
    assert_eq!(open_for("quota"), Some(30_000));
    // Both are idle for longer than the 1 s bound, but within their open periods: kept.
    advance_to(&clock, 6002);
    call("steady", Ok(1)).unwrap();
    assert_eq!(keys_of(&cmd), ["flaky", "quota", "steady"]);
    assert_eq!(keyed_status(&cmd, "quota"), Some(Status::Open));
    assert_eq!(keyed_status(&cmd, "flaky"), Some(Status::Open));
    advance_to(&clock, 15_001);
    call("steady", Ok(1)).unwrap();
    assert_eq!(keys_of(&cmd), ["flaky", "quota", "steady"]);
    // Past flaky's open period it is evicted for idleness; quota's Retry-After still holds.
    advance_to(&clock, 15_002);
    call("steady", Ok(1)).unwrap();
    assert_eq!(keys_of(&cmd), ["quota", "steady"]);
    advance_to(&clock, 30_000);
    call("steady", Ok(1)).unwrap();
    assert_eq!(keys_of(&cmd), ["quota", "steady"]);
    assert_eq!(
        call("quota", Ok(1)).unwrap_err().failure_type(),
        FailureType::ShortCircuit
    );
    // Used at 30 000 (short-circuited), quota goes idle 1 s after its open period.
    advance_to(&clock, 31_000);
    call("steady", Ok(1)).unwrap();
    assert_eq!(keys_of(&cmd), ["quota", "steady"]);
    advance_to(&clock, 31_001);
    call("steady", Ok(1)).unwrap();
    assert_eq!(keys_of(&cmd), ["steady"]);
}

#[test]
fn when_every_keyed_breaker_is_open_a_new_key_goes_through_the_overflow_breaker() {
    let (registry, clock, events) = registry();
    let cmd = builder("Keys")
        .classify(classify_503)
        .breaker_per_key(NonZeroUsize::new(2).unwrap(), None)
        .build_in(&registry)
        .unwrap();
    let call = |key: &str, answer: Result<u32, HttpError>| {
        cmd.run(move || answer).breaker_key(key).execute()
    };
    call("a", unavailable(None)).unwrap_err(); // OPEN until 5000
    advance_to(&clock, 10);
    call("b", unavailable(None)).unwrap_err(); // OPEN until 5010
    events.take();
    // Both kept breakers are OPEN within their open periods: a new key is neither kept nor
    // given an OPEN breaker's place; it goes through the command's one overflow breaker.
    assert_eq!(call("c", Ok(7)).unwrap(), 7);
    assert_eq!(keys_of(&cmd), ["a", "b"]);
    assert!(cmd.keyed_circuit_breaker("c").is_none());
    let overflow = cmd
        .keyed_circuit_breaker(hystrix::circuit::OVERFLOW_BREAKER_KEY)
        .unwrap();
    assert_eq!(overflow.breaker_key(), Some("(overflow)"));
    assert_eq!(overflow.status(), Status::Closed);
    for key in ["a", "b"] {
        assert_eq!(
            call(key, Ok(1)).unwrap_err().failure_type(),
            FailureType::ShortCircuit
        );
    }
    // The new keys share the overflow breaker: one's trip short-circuits the others.
    advance_to(&clock, 100);
    call("d", unavailable(None)).unwrap_err();
    assert_eq!(overflow.status(), Status::Open);
    assert_eq!(
        call("e", Ok(1)).unwrap_err().failure_type(),
        FailureType::ShortCircuit
    );
    assert_eq!(
        events.take(),
        ["Keys/(overflow) opened for 5000 ms: the error asked to trip now"]
    );
    // Past a's open period (5000) a new key takes a's place (b's period runs until 5010)...
    advance_to(&clock, 5001);
    assert_eq!(call("f", Ok(1)).unwrap(), 1);
    assert_eq!(keys_of(&cmd), ["b", "f"]);
    // ... and CLOSED breakers go before an OPEN one, even one past its open period.
    assert_eq!(call("g", Ok(1)).unwrap(), 1);
    assert_eq!(keys_of(&cmd), ["b", "g"]);
    advance_to(&clock, 5011);
    assert_eq!(call("h", Ok(1)).unwrap(), 1);
    assert_eq!(keys_of(&cmd), ["b", "h"]);
    assert_eq!(keyed_status(&cmd, "b"), Some(Status::Open));
}

/// A keyed breaker closed by hand before its open period's end gives its place to a new key
/// at once: the map, which knew both breakers held until 5000 ms, looks at them again.
#[test]
fn a_keyed_breaker_closed_by_hand_makes_room_before_its_open_period_ends() {
    let (registry, clock, _) = registry();
    let cmd = builder("Closing")
        .classify(classify_503)
        .breaker_per_key(NonZeroUsize::new(2).unwrap(), None)
        .build_in(&registry)
        .unwrap();
    let call = |key: &str, answer: Result<u32, HttpError>| {
        cmd.run(move || answer).breaker_key(key).execute()
    };
    call("a", unavailable(None)).unwrap_err();
    call("b", unavailable(None)).unwrap_err();
    advance_to(&clock, 10);
    assert_eq!(call("c", Ok(7)).unwrap(), 7);
    assert!(
        cmd.keyed_circuit_breaker("c").is_none(),
        "c went through the overflow breaker"
    );
    cmd.keyed_circuit_breaker("a").unwrap().force_close();
    assert_eq!(call("d", Ok(8)).unwrap(), 8);
    assert_eq!(keys_of(&cmd), ["b", "d"]);
    assert_eq!(keyed_status(&cmd, "d"), Some(Status::Closed));
}

#[test]
fn a_breaker_key_on_a_command_without_keyed_breakers_is_a_clear_error() {
    let (registry, _, _) = registry();
    let cmd = builder("Plain").build_in(&registry).unwrap();
    let err: HystrixError<DependencyError> = cmd.run(ok).breaker_key("x").execute().unwrap_err();
    assert!(err.to_string().contains("breaker_per_key"), "{err}");
}

// ------------------------------------------------------------------------------------------------
// Journal and replay

#[test]
fn short_circuited_requests_are_journalled_bounded_and_replayed_oldest_first_after_close() {
    let (registry, clock, events) = registry();
    let (replayed_tx, replayed) = std::sync::mpsc::channel();
    let replayed_tx = std::sync::Mutex::new(replayed_tx);
    let journal = JournalConfig::new(move |entry| {
        replayed_tx.lock().unwrap().send(entry).unwrap();
    })
    .capacity(NonZeroUsize::new(3).unwrap())
    .replay_per_second(NonZeroU32::new(10).unwrap());
    let cmd = builder("Orders")
        .journal(journal)
        .build_in(&registry)
        .unwrap();
    trip(&cmd, &clock);
    events.take();
    for order in 1..=5 {
        let err = cmd
            .run(ok)
            .journal(format!("order-{order}"))
            .execute()
            .unwrap_err();
        assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    }
    // A call without a description is not journalled.
    assert!(short_circuited(&cmd));
    assert_eq!(
        events.take(),
        [
            "Orders journalled order-1",
            "Orders journalled order-2",
            "Orders journalled order-3",
            "Orders journal dropped order-1",
            "Orders journalled order-4",
            "Orders journal dropped order-2",
            "Orders journalled order-5",
        ]
    );
    assert_eq!(
        cmd.journal_counts(),
        Some(JournalCounts {
            journalled: 5,
            replayed: 0,
            dropped: 2,
            pending: 3
        })
    );
    let entry_time = clock.epoch_ms();
    // The trial closes the breaker; replay starts at once, then one every 100 ms.
    clock.advance_ms(5001);
    cmd.run(ok).execute().unwrap();
    let recv = || replayed.recv_timeout(Duration::from_secs(5)).unwrap();
    let first = recv();
    assert_eq!(first.description, "order-3");
    assert_eq!(first.command_key.as_str(), "Orders");
    assert_eq!(first.at_epoch_ms, entry_time);
    assert!(replayed.try_recv().is_err(), "the next only after 100 ms");
    clock.advance_ms(100);
    assert_eq!(recv().description, "order-4");
    clock.advance_ms(100);
    assert_eq!(recv().description, "order-5");
    // Each Replayed event follows the replay function's return, on the executor's thread.
    wait_for("the replay events", || {
        events
            .0
            .lock()
            .unwrap()
            .iter()
            .filter(|event| event.contains("replayed"))
            .count()
            == 3
    });
    assert_eq!(cmd.journal_counts().unwrap().replayed, 3);
    assert_eq!(cmd.journal_counts().unwrap().pending, 0);
    let replay_events: Vec<String> = events
        .take()
        .into_iter()
        .filter(|event| event.contains("replayed"))
        .collect();
    assert_eq!(
        replay_events,
        [
            "Orders replayed order-3",
            "Orders replayed order-4",
            "Orders replayed order-5"
        ]
    );
}

// ------------------------------------------------------------------------------------------------
// Dry run

#[test]
fn dry_run_never_rejects_yet_counts_would_short_circuit() {
    let (registry, clock, events) = registry();
    let cmd = builder("Calibrating")
        .property("circuitBreaker.dryRun", true)
        .build_in(&registry)
        .unwrap();
    trip(&cmd, &clock);
    assert!(cmd.circuit_breaker().is_open());
    for _ in 0..10 {
        let outcome = cmd.run(ok).execute_outcome();
        assert_eq!(
            names(outcome.execution_result().execution_events()),
            ["SUCCESS", "WOULD_SHORT_CIRCUIT"]
        );
        assert_eq!(*outcome.response().as_ref().unwrap(), 1);
    }
    // What it would do is reported as usual: OPEN, then HALF_OPEN and closed by a trial.
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    clock.advance_ms(1000);
    let metrics = cmd.metrics();
    assert_eq!(metrics.rolling_count(EventType::WouldShortCircuit), 10);
    assert_eq!(metrics.rolling_count(EventType::ShortCircuited), 0);
    assert_eq!(metrics.rolling_count(EventType::Success), 10);
    clock.advance_ms(4001);
    cmd.run(ok).execute().unwrap();
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    let kinds: Vec<String> = events
        .take()
        .into_iter()
        .map(|event| event.split(':').next().unwrap().to_owned())
        .collect();
    assert_eq!(
        kinds,
        [
            "Calibrating opened for 5000 ms",
            "Calibrating half-open",
            "Calibrating closed"
        ]
    );
}

// ------------------------------------------------------------------------------------------------
// Found by a fresh user's trial

#[test]
fn a_listener_may_call_back_into_the_breaker_it_hears() {
    struct ForceOpenOnOpen(std::sync::Mutex<Option<hystrix::CircuitBreakerHandle>>);
    impl hystrix::CircuitBreakerListener for ForceOpenOnOpen {
        fn on_event(&self, event: &hystrix::CircuitBreakerEvent) {
            if let hystrix::circuit::BreakerEventKind::Opened { .. } = event.kind
                && let Some(handle) = &*self.0.lock().unwrap()
            {
                handle.force_open();
            }
        }
    }
    let listener = Arc::new(ForceOpenOnOpen(std::sync::Mutex::new(None)));
    struct Shared(Arc<ForceOpenOnOpen>);
    impl hystrix::CircuitBreakerListener for Shared {
        fn on_event(&self, event: &hystrix::CircuitBreakerEvent) {
            self.0.on_event(event);
        }
    }
    let clock = ManualClock::new();
    let registry = Registry::builder()
        .clock(clock.clone())
        .circuit_breaker_listener(Shared(Arc::clone(&listener)))
        .build();
    let cmd = builder("CallsBack").build_in(&registry).unwrap();
    *listener.0.lock().unwrap() = Some(cmd.circuit_breaker());
    trip(&cmd, &clock); // would hang if the event came under the breaker's lock
    assert_eq!(
        cmd.circuit_breaker().trip_cause().unwrap().to_string(),
        "forced open by force_open() until its sleep window passes"
    );
}

/// A call admitted now (the breaker CLOSED) whose dependency answers when the sender says.
fn pending_call(
    cmd: &Command<hystrix::Classifier<HttpError>>,
) -> (
    futures::channel::oneshot::Sender<Result<u32, HttpError>>,
    std::pin::Pin<Box<impl std::future::Future + '_>>,
) {
    let (answer, rx) = futures::channel::oneshot::channel::<Result<u32, HttpError>>();
    let mut call = Box::pin(
        cmd.run_async(async move { rx.await.unwrap() })
            .execute_async(),
    );
    assert!(common::poll_once(call.as_mut()).is_pending());
    (answer, call)
}

#[test]
fn concurrent_retry_afters_keep_the_breaker_open_for_the_longest() {
    let (registry, clock, events) = registry();
    let cmd = builder("Storm")
        .classify(classify_http)
        .build_in(&registry)
        .unwrap();
    // Two calls admitted while CLOSED, each waiting for its answer.
    let (first, mut first_call) = pending_call(&cmd);
    let (second, mut second_call) = pending_call(&cmd);
    first.send(unavailable(Some("10"))).unwrap();
    assert!(common::poll_once(first_call.as_mut()).is_ready());
    let breaker = cmd.circuit_breaker();
    assert_eq!(breaker.open_duration_ms(), Some(10_000));
    // 500 ms later (within its 1000 ms timeout) the other answers with Retry-After 60: the
    // opening lasts until then (60.5 s after it began); the longest wait wins, with no new
    // event or generation.
    clock.advance_ms(500);
    second.send(unavailable(Some("60"))).unwrap();
    assert!(common::poll_once(second_call.as_mut()).is_ready());
    assert_eq!(breaker.open_duration_ms(), Some(60_500));
    advance_to(&clock, 60_500);
    assert_eq!(
        cmd.run(|| Ok::<u32, HttpError>(1))
            .execute()
            .unwrap_err()
            .failure_type(),
        FailureType::ShortCircuit
    );
    advance_to(&clock, 60_501);
    assert_eq!(cmd.run(|| Ok::<u32, HttpError>(1)).execute().unwrap(), 1);
    let opened: Vec<String> = events
        .take()
        .into_iter()
        .filter(|event| event.contains("opened"))
        .collect();
    assert_eq!(opened.len(), 1, "{opened:?}");
}

/// A Retry-After that ends exactly where the opening already ends (by the sleep window) is
/// still a minimum: a sleep window shortened later does not cut it (found by a fresh user's
/// trial of the `stay_open_until` mutant TESTING.md had called equivalent).
#[test]
fn a_retry_after_ending_with_the_sleep_window_outlasts_a_shorter_sleep_window() {
    let (registry, clock, _) = registry();
    let cmd = builder("Even")
        .classify(classify_http)
        .timeout_enabled(false)
        .build_in(&registry)
        .unwrap();
    let (first, mut first_call) = pending_call(&cmd);
    let (second, mut second_call) = pending_call(&cmd);
    // Opened at 0 for the 5000 ms sleep window (no minimum of its own) ...
    first.send(unavailable(Some("0"))).unwrap();
    assert!(common::poll_once(first_call.as_mut()).is_ready());
    let breaker = cmd.circuit_breaker();
    assert_eq!(breaker.open_duration_ms(), Some(5000));
    // ... then asked at 1000 ms to stay open 4 s more: until 5000 ms, where it ends anyway.
    advance_to(&clock, 1000);
    second.send(unavailable(Some("4"))).unwrap();
    assert!(common::poll_once(second_call.as_mut()).is_ready());
    registry
        .properties()
        .set(
            "hystrix.command.Even.circuitBreaker.sleepWindowInMilliseconds",
            1000,
        )
        .unwrap();
    assert_eq!(breaker.open_duration_ms(), Some(5000));
    advance_to(&clock, 5000);
    assert_eq!(
        cmd.run(|| Ok::<u32, HttpError>(1))
            .execute()
            .unwrap_err()
            .failure_type(),
        FailureType::ShortCircuit
    );
    advance_to(&clock, 5001);
    assert_eq!(cmd.run(|| Ok::<u32, HttpError>(1)).execute().unwrap(), 1);
}

#[test]
fn a_metrics_snapshot_brings_the_breaker_up_to_date() {
    let (registry, clock, _) = registry();
    let cmd = builder("Fresh").build_in(&registry).unwrap();
    for _ in 0..20 {
        cmd.run(boom).execute().unwrap_err();
    }
    clock.advance_ms(500);
    // No execution and no breaker read since: the snapshot trips it and shows the duration.
    assert_eq!(cmd.metrics().circuit_open_duration_ms(), Some(5000));
}

#[test]
fn a_manual_close_or_reset_replays_the_journal() {
    let (registry, clock, _) = registry();
    let (tx, replayed) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let cmd = builder("Manual")
        .journal(JournalConfig::new(move |entry| {
            tx.lock().unwrap().send(entry.description).unwrap();
        }))
        .build_in(&registry)
        .unwrap();
    trip(&cmd, &clock);
    cmd.run(ok).journal("a").execute().unwrap_err();
    cmd.circuit_breaker().force_close();
    assert_eq!(replayed.recv_timeout(Duration::from_secs(5)).unwrap(), "a");
    cmd.circuit_breaker().force_open();
    cmd.run(ok).journal("b").execute().unwrap_err();
    cmd.circuit_breaker().reset();
    // Replay goes on at its pace (10 per second by default): the next one 100 ms later.
    clock.advance_ms(100);
    assert_eq!(replayed.recv_timeout(Duration::from_secs(5)).unwrap(), "b");
}

#[test]
fn keyed_short_circuits_are_not_journalled_and_looks_do_not_make_keyed_breakers() {
    let (registry, clock, events) = registry();
    let cmd = builder("KeyedJournal")
        .journal(JournalConfig::new(|_| {}))
        .breaker_per_key(NonZeroUsize::new(2).unwrap(), None)
        .build_in(&registry)
        .unwrap();
    for _ in 0..20 {
        cmd.run(boom).breaker_key("bad").execute().unwrap_err();
    }
    clock.advance_ms(500);
    let err = cmd
        .run(ok)
        .breaker_key("bad")
        .journal("kept?")
        .execute()
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    assert_eq!(cmd.journal_counts().unwrap().journalled, 0);
    assert!(
        events
            .take()
            .iter()
            .all(|event| !event.contains("journalled"))
    );
    // Looking does not make a breaker (nor evict one).
    assert!(cmd.keyed_circuit_breaker("never-used").is_none());
    assert_eq!(cmd.keyed_circuit_breaker_count(), 1);
    // Churn of new keys evicts CLOSED breakers first: "bad" (OPEN) stays.
    for key in ["x", "y", "z"] {
        cmd.run(ok).breaker_key(key).execute().unwrap();
    }
    assert!(cmd.keyed_circuit_breaker("bad").unwrap().is_open());
    assert!(cmd.keyed_circuit_breaker("x").is_none());
    assert_eq!(
        cmd.run(ok)
            .breaker_key("bad")
            .execute()
            .unwrap_err()
            .failure_type(),
        FailureType::ShortCircuit
    );
}

#[test]
fn a_later_definition_may_share_the_extras_but_not_ask_for_others() {
    let (registry, _, _) = registry();
    let keyed = || builder("Twice").breaker_per_key(NonZeroUsize::new(10).unwrap(), None);
    keyed().build_in(&registry).unwrap();
    keyed().build_in(&registry).unwrap(); // the same extras
    builder("Twice").build_in(&registry).unwrap(); // none: shares the first's
    let err = builder("Twice")
        .journal(JournalConfig::new(|_| {}))
        .build_in(&registry)
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("circuit-breaker extras"), "{text}");
    assert!(text.contains("journal"), "{text}");
    let err = builder("Twice")
        .open_backoff(Backoff::exponential(2.0, Duration::from_secs(60)).unwrap())
        .build_in(&registry)
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "command `Twice` is already defined with a different circuit-breaker extras: first \
         `keyed breakers (at most 10)`, now `exponential backoff`"
    );
    // A breaker key on a command without keyed breakers: a misuse error, no fallback tried.
    let plain = builder("NoKeys").build_in(&registry).unwrap();
    let outcome = plain
        .run(ok)
        .breaker_key("h")
        .fallback(|_| Ok::<u32, DependencyError>(0))
        .execute_outcome();
    let err = outcome.response().as_ref().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Misuse);
    assert!(!err.to_string().contains("fallback"), "{err}");
    assert!(outcome.execution_result().execution_events().is_empty());
}

#[test]
fn manual_overrides_on_a_shared_command_are_published() {
    let (a, b, store, clock, _) = two_instances();
    let (cmd_a, cmd_b) = (shared(&a), shared(&b));
    trip(&cmd_a, &clock);
    block_on(a.sync_state_store());
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Open);
    // Closed by hand on A: the store hears it, and A is not reopened by the store's view.
    cmd_a.circuit_breaker().force_close();
    block_on(a.sync_state_store());
    assert_eq!(store.view_now("Shared").status, SharedStatus::Closed);
    block_on(a.sync_state_store());
    assert_eq!(cmd_a.circuit_breaker().status(), Status::Closed);
    // Opened by hand on B: published as a trip; A follows.
    cmd_b.circuit_breaker().reset();
    block_on(b.sync_state_store());
    cmd_b.circuit_breaker().force_open();
    block_on(b.sync_state_store());
    assert!(matches!(
        store.view_now("Shared").status,
        SharedStatus::Open { .. }
    ));
    block_on(a.sync_state_store());
    assert_eq!(cmd_a.circuit_breaker().status(), Status::Open);
}

#[test]
fn a_trip_published_on_a_stale_generation_is_made_on_the_current_one() {
    let (a, b, store, clock, _) = two_instances();
    let (cmd_a, cmd_b) = (shared(&a), shared(&b));
    // B trips and closes (the store's generation moves to 2); A has not synced meanwhile.
    trip(&cmd_b, &clock);
    block_on(b.sync_state_store());
    advance_to(&clock, 5501);
    block_on(b.sync_state_store());
    cmd_b.run(ok).execute().unwrap();
    block_on(b.sync_state_store());
    assert_eq!(store.view_now("Shared").generation, 2);
    // A trips: its publish with generation 0 fails, is read again, and made on generation 2.
    advance_to(&clock, 6000);
    trip(&cmd_a, &clock);
    block_on(a.sync_state_store());
    assert!(matches!(
        store.view_now("Shared").status,
        SharedStatus::Open { .. }
    ));
    block_on(b.sync_state_store());
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Open);
}

#[test]
fn with_a_shared_store_a_healthy_probe_needs_the_probe_permit() {
    let (a, b, _store, clock, events) = two_instances();
    let probed = |registry: &Registry| {
        builder("Shared")
            .shared_state(true)
            .health_probe(
                // A timeout apart from the interval, so that a running probe's deadline timer
                // is never mistaken for the next probe's.
                HealthProbe::blocking(|| true, Duration::from_secs(3))
                    .unwrap()
                    .timeout(Duration::from_secs(1))
                    .unwrap(),
            )
            .build_in(registry)
            .unwrap()
    };
    let (cmd_a, cmd_b) = (probed(&a), probed(&b));
    trip(&cmd_a, &clock); // opened at 500 ms; the shared open period ends at 5500 ms
    block_on(a.sync_state_store());
    block_on(b.sync_state_store()); // B opened from the store at 500 ms too
    events.take();
    // The probes (at 3500 ms) find it healthy, but the store grants no permit while its
    // shared open period runs: both stay OPEN and probe again at 6500 ms.
    advance_to(&clock, 3500);
    wait_for("both probes to be rescheduled", || {
        clock.next_timer_deadline_ms() == Some(6500) && clock.pending_timers() == 2
    });
    block_on(a.sync_state_store());
    block_on(b.sync_state_store());
    assert_eq!(cmd_a.circuit_breaker().status(), Status::Open);
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Open);
    // After it, A's round asks first and gets the permit; B's is refused.
    advance_to(&clock, 5501);
    block_on(a.sync_state_store());
    block_on(b.sync_state_store());
    advance_to(&clock, 6500);
    wait_for("A's probe to half-open it", || {
        events.0.lock().unwrap().len() == 1
    });
    assert_eq!(events.take(), ["Shared half-open by probe"]);
    wait_for(
        &format!(
            "B's probe to be rescheduled ({:?}, {})",
            clock.next_timer_deadline_ms(),
            clock.pending_timers()
        ),
        || clock.next_timer_deadline_ms() == Some(9500),
    );
    assert_eq!(cmd_b.circuit_breaker().status(), Status::Open);
    assert!(
        short_circuited(&cmd_b),
        "B sends no trial without the permit"
    );
    assert_eq!(cmd_a.run(ok).execute().unwrap(), 1);
}
