//! The circuit breaker over its health counts, with exact values on the manual clock: SPEC §2.3
//! and §4, Part A 1-3 (trials only move HALF_OPEN), 14 (health buckets), 15 (trial budget and
//! generations), 21-23 (dynamic flags, manual override, events) and 31 (hung trials).
//!
//! Defaults unless a test says otherwise: health buckets of 500 ms over 10 000 ms, 20 requests,
//! 50 %, a 5000 ms sleep window, one trial. Executions that must be in flight at once are async
//! runs waiting on a channel, stepped by hand with `poll_once`.

#![allow(clippy::unwrap_used)]

mod common;

use std::future::Future;
use std::pin::Pin;

use std::task::Poll;
use std::time::Duration;

use common::{BreakerEvents as Events, DependencyError, builder, names, poll_once};
use futures::channel::oneshot;
use hystrix::circuit::Backoff;
use hystrix::testing::TestRegistry;
use hystrix::{
    CircuitBreakerEvent, CircuitBreakerListener, Class, Command, FailureType, HealthCounts,
    HystrixError, Registry, Status,
    clock::{Clock, ManualClock},
};

type Error = HystrixError<DependencyError>;

fn ok() -> Result<u32, DependencyError> {
    Ok(1)
}

fn boom() -> Result<u32, DependencyError> {
    Err(DependencyError("boom"))
}

/// `successes` successful and `failures` failed executions now.
fn run_many(cmd: &Command, successes: u32, failures: u32) {
    for _ in 0..successes {
        assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    }
    for _ in 0..failures {
        let err = cmd.run(boom).execute().unwrap_err();
        assert_eq!(err.failure_type(), FailureType::CommandException);
    }
}

fn health(total_requests: u64, error_count: u64, error_percentage: u32) -> HealthCounts {
    HealthCounts {
        total_requests,
        error_count,
        error_percentage,
        ..HealthCounts::default()
    }
}

fn advance_to(test: &TestRegistry, ms: u64) {
    let now = test.clock().now_ms();
    assert!(ms >= now, "time goes forward only");
    test.advance(Duration::from_millis(ms - now));
}

/// Trips the breaker at 500 ms with 20 failures at 0 ms (the clock must be at 0).
fn trip(test: &TestRegistry, cmd: &Command) {
    assert_eq!(test.clock().now_ms(), 0);
    run_many(cmd, 0, 20);
    advance_to(test, 500);
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
}

/// An execution in flight: an async run waiting for its answer.
struct InFlight<'a> {
    answer: Option<oneshot::Sender<Result<u32, DependencyError>>>,
    execution: Pin<Box<dyn Future<Output = Result<u32, Error>> + 'a>>,
}

impl<'a> InFlight<'a> {
    /// Starts an execution of `cmd` and checks that it was admitted (its run is waiting).
    fn start(cmd: &'a Command) -> Self {
        let (answer, rx) = oneshot::channel();
        let run = async move { rx.await.unwrap_or(Err(DependencyError("dropped"))) };
        let mut execution: Pin<Box<dyn Future<Output = _> + 'a>> =
            Box::pin(cmd.run_async(run).execute_async());
        assert!(poll_once(execution.as_mut()).is_pending(), "admitted");
        InFlight {
            answer: Some(answer),
            execution,
        }
    }

    /// Answers the run with `result` and returns what the caller gets.
    fn finish(mut self, result: Result<u32, DependencyError>) -> Result<u32, Error> {
        self.answer.take().unwrap().send(result).unwrap();
        self.poll()
    }

    /// What the caller gets now (the execution must be done).
    fn poll(&mut self) -> Result<u32, Error> {
        match poll_once(self.execution.as_mut()) {
            Poll::Ready(result) => result,
            Poll::Pending => panic!("the execution is still running"),
        }
    }
}

/// The next call runs (as the trial) and its success closes the breaker.
fn a_trial_succeeds_and_closes(cmd: &Command) {
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
}

fn short_circuited(cmd: &Command) -> Error {
    let outcome = cmd.run(ok).execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["SHORT_CIRCUITED", "FALLBACK_MISSING"]
    );
    let err = outcome.into_response().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::ShortCircuit);
    err
}

#[test]
fn trips_at_20_requests_and_50_percent_within_one_health_interval() {
    let test = TestRegistry::new();
    let cmd = builder("Trips").build_in(test.registry()).unwrap();
    run_many(&cmd, 10, 10);
    // The health bucket still filling is not counted.
    assert_eq!(cmd.circuit_breaker().health_counts(), health(0, 0, 0));
    advance_to(&test, 499);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    assert!(!cmd.is_circuit_breaker_open());
    advance_to(&test, 500);
    assert_eq!(cmd.circuit_breaker().health_counts(), health(20, 10, 50));
    assert!(cmd.is_circuit_breaker_open());
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    let err = short_circuited(&cmd);
    let cause = "50% of 20 requests failed in the last 10000 ms \
                 (circuitBreaker.errorThresholdPercentage 50%); last failure: FAILURE";
    assert_eq!(err.trip_cause().unwrap().to_string(), cause);
    assert_eq!(
        cmd.circuit_breaker().trip_cause().unwrap().to_string(),
        cause
    );
    assert_eq!(
        err.to_string(),
        format!(
            "command Trips short-circuited (circuit open: {cause}) and no fallback available \
             (tune hystrix.command.Trips.circuitBreaker.sleepWindowInMilliseconds or add a \
             fallback)"
        )
    );
}

#[test]
fn does_not_trip_at_19_requests() {
    let test = TestRegistry::new();
    let cmd = builder("Nineteen").build_in(test.registry()).unwrap();
    run_many(&cmd, 0, 19);
    advance_to(&test, 500);
    assert_eq!(cmd.circuit_breaker().health_counts(), health(19, 19, 100));
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
}

#[test]
fn does_not_trip_at_49_percent_and_percentages_are_truncated() {
    let test = TestRegistry::new();
    let cmd = builder("FortyNine").build_in(test.registry()).unwrap();
    run_many(&cmd, 51, 49);
    advance_to(&test, 500);
    assert_eq!(cmd.circuit_breaker().health_counts(), health(100, 49, 49));
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    // 50 of 101 is 49.5 %: still 49.
    run_many(&cmd, 0, 1);
    advance_to(&test, 1000);
    assert_eq!(cmd.circuit_breaker().health_counts(), health(101, 50, 49));
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    // 51 of 102 is 50 %: trips.
    run_many(&cmd, 0, 1);
    advance_to(&test, 1500);
    assert_eq!(cmd.circuit_breaker().health_counts(), health(102, 51, 50));
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
}

#[test]
fn one_error_of_three_is_33_percent_and_no_requests_is_0() {
    let test = TestRegistry::new();
    let cmd = builder("Third").build_in(test.registry()).unwrap();
    advance_to(&test, 500);
    assert_eq!(cmd.circuit_breaker().health_counts(), health(0, 0, 0));
    run_many(&cmd, 2, 1);
    advance_to(&test, 1000);
    assert_eq!(cmd.circuit_breaker().health_counts(), health(3, 1, 33));
    assert_eq!(cmd.metrics().health_counts(), health(3, 1, 33));
}

#[test]
fn rejections_and_timeouts_count_as_errors_in_health() {
    let test = TestRegistry::new();
    let cmd = builder("Kinds")
        .semaphore_max_concurrent_requests(1)
        .build_in(test.registry())
        .unwrap();
    let held = InFlight::start(&cmd);
    let rejected = cmd.run(ok).execute().unwrap_err();
    assert_eq!(
        rejected.failure_type(),
        FailureType::RejectedSemaphoreExecution
    );
    advance_to(&test, 1000);
    let timed_out = held.finish(Ok(1)).unwrap_err();
    assert!(timed_out.is_timeout());
    run_many(&cmd, 1, 0);
    advance_to(&test, 1500);
    // SEMAPHORE_REJECTED, TIMEOUT and SUCCESS.
    assert_eq!(cmd.circuit_breaker().health_counts(), health(3, 2, 66));
}

/// The trip cause names the kind of the last failure counted before the trip.
#[test]
fn the_trip_cause_names_a_rejection_or_a_timeout_as_the_last_failure() {
    let cause = |kind: &str| {
        format!(
            "100% of 20 requests failed in the last 10000 ms \
             (circuitBreaker.errorThresholdPercentage 50%); last failure: {kind}"
        )
    };

    let test = TestRegistry::new();
    let cmd = builder("RejectedTrip")
        .semaphore_max_concurrent_requests(1)
        .build_in(test.registry())
        .unwrap();
    let held = InFlight::start(&cmd);
    for _ in 0..20 {
        let err = cmd.run(ok).execute().unwrap_err();
        assert_eq!(err.failure_type(), FailureType::RejectedSemaphoreExecution);
    }
    advance_to(&test, 500);
    assert!(cmd.is_circuit_breaker_open());
    assert_eq!(
        cmd.circuit_breaker().trip_cause().unwrap().to_string(),
        cause("SEMAPHORE_REJECTED")
    );
    drop(held);

    let test = TestRegistry::new();
    let cmd = builder("TimedOutTrip")
        .semaphore_max_concurrent_requests(20)
        .build_in(test.registry())
        .unwrap();
    let mut held: Vec<_> = (0..20).map(|_| InFlight::start(&cmd)).collect();
    advance_to(&test, 1000);
    for execution in &mut held {
        assert!(execution.poll().unwrap_err().is_timeout());
    }
    advance_to(&test, 1500);
    assert!(cmd.is_circuit_breaker_open());
    assert_eq!(
        cmd.circuit_breaker().trip_cause().unwrap().to_string(),
        cause("TIMEOUT")
    );
}

#[test]
fn at_exactly_the_sleep_window_it_is_still_open_and_1_ms_later_one_trial_closes_it() {
    let test = TestRegistry::new();
    let cmd = builder("Window").build_in(test.registry()).unwrap();
    trip(&test, &cmd);
    advance_to(&test, 5500);
    short_circuited(&cmd);
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);

    advance_to(&test, 5501);
    let trial = InFlight::start(&cmd);
    assert_eq!(cmd.circuit_breaker().status(), Status::HalfOpen);
    assert!(cmd.is_circuit_breaker_open());
    // Only the trial runs while it is out.
    short_circuited(&cmd);
    short_circuited(&cmd);
    assert_eq!(trial.finish(Ok(7)).unwrap(), 7);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    assert!(!cmd.is_circuit_breaker_open());

    // Health restarted from zero: the 20 failures (and the trial) are gone.
    advance_to(&test, 6000);
    assert_eq!(cmd.circuit_breaker().health_counts(), health(0, 0, 0));
    run_many(&cmd, 0, 1);
    advance_to(&test, 6500);
    assert_eq!(cmd.circuit_breaker().health_counts(), health(1, 1, 100));
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
}

#[test]
fn a_failed_trial_reopens_for_a_new_sleep_window() {
    let test = TestRegistry::new();
    let cmd = builder("TrialFails").build_in(test.registry()).unwrap();
    trip(&test, &cmd);
    advance_to(&test, 5501);
    let err = cmd.run(boom).execute().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    assert_eq!(
        cmd.circuit_breaker().trip_cause().unwrap().to_string(),
        "the half-open trial ended in FAILURE"
    );
    advance_to(&test, 10_501);
    let err = short_circuited(&cmd);
    assert_eq!(
        err.trip_cause().unwrap().to_string(),
        "the half-open trial ended in FAILURE"
    );
    advance_to(&test, 10_502);
    a_trial_succeeds_and_closes(&cmd);
}

#[test]
fn a_timed_out_trial_reopens_when_it_times_out() {
    let test = TestRegistry::new();
    let cmd = builder("TrialTimesOut")
        .timeout(Duration::from_millis(1000))
        .build_in(test.registry())
        .unwrap();
    trip(&test, &cmd);
    advance_to(&test, 5501);
    let mut trial = InFlight::start(&cmd);
    advance_to(&test, 6501);
    assert!(trial.poll().unwrap_err().is_timeout());
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    assert_eq!(
        cmd.circuit_breaker().trip_cause().unwrap().to_string(),
        "the half-open trial ended in TIMEOUT"
    );
    advance_to(&test, 11_501);
    short_circuited(&cmd);
    advance_to(&test, 11_502);
    a_trial_succeeds_and_closes(&cmd);
}

#[test]
fn a_cancelled_trial_gives_its_slot_back_at_once() {
    let test = TestRegistry::new();
    let cmd = builder("TrialCancelled").build_in(test.registry()).unwrap();
    trip(&test, &cmd);
    advance_to(&test, 5501);
    let trial = InFlight::start(&cmd);
    short_circuited(&cmd);
    drop(trial);
    assert_eq!(cmd.circuit_breaker().status(), Status::HalfOpen);
    // The next request is the trial, without another sleep window.
    a_trial_succeeds_and_closes(&cmd);
}

#[test]
fn a_bad_request_trial_gives_its_slot_back_without_restarting_the_sleep_window() {
    let test = TestRegistry::new();
    let cmd = builder("TrialBadRequest")
        .classify(|err: &DependencyError| match err.0 {
            "bad" => Class::BadRequest,
            _ => Class::Failure,
        })
        .build_in(test.registry())
        .unwrap();
    cmd.circuit_breaker().force_open();
    advance_to(&test, 5001);
    let err = cmd
        .run(|| Err::<u32, _>(DependencyError("bad")))
        .execute()
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::BadRequest);
    assert_eq!(cmd.circuit_breaker().status(), Status::HalfOpen);
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
}

#[test]
fn an_ignored_error_as_trial_counts_as_a_success() {
    let test = TestRegistry::new();
    let cmd = builder("TrialIgnored")
        .classify(|_: &DependencyError| Class::Ignored)
        .build_in(test.registry())
        .unwrap();
    // Ignored errors are healthy: 20 of them do not trip it, so trip it by hand.
    cmd.circuit_breaker().force_open();
    advance_to(&test, 5001);
    let err = cmd.run(boom).execute().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Ignored);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
}

#[test]
fn a_hung_trial_is_replaced_after_the_sleep_window_and_its_late_answer_moves_nothing() {
    let test = TestRegistry::new();
    let cmd = builder("TrialHangs")
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    trip(&test, &cmd);
    advance_to(&test, 5501);
    let hung = InFlight::start(&cmd);
    advance_to(&test, 10_501);
    short_circuited(&cmd);
    advance_to(&test, 10_502);
    let second = InFlight::start(&cmd);
    assert_eq!(cmd.circuit_breaker().status(), Status::HalfOpen);
    short_circuited(&cmd);
    // The first trial answers late: its generation is gone, so its success closes nothing.
    assert_eq!(hung.finish(Ok(1)).unwrap(), 1);
    assert_eq!(cmd.circuit_breaker().status(), Status::HalfOpen);
    short_circuited(&cmd);
    let err = second
        .finish(Err(DependencyError("still down")))
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
}

/// A stale trial's late failure leaves the current half-open period as it is, down to the
/// open duration it reports (with a backoff, a failure of a current trial would double it).
#[test]
fn a_hung_trials_late_failure_changes_nothing_of_the_new_half_open_period() {
    let test = TestRegistry::new();
    let cmd = builder("StaleFailure")
        .timeout_enabled(false)
        .open_backoff(Backoff::exponential(2.0, Duration::from_secs(60)).unwrap())
        .build_in(test.registry())
        .unwrap();
    trip(&test, &cmd);
    advance_to(&test, 5501);
    let hung = InFlight::start(&cmd);
    advance_to(&test, 10_502);
    let second = InFlight::start(&cmd);
    let breaker = cmd.circuit_breaker();
    assert_eq!(
        (breaker.status(), breaker.open_duration_ms()),
        (Status::HalfOpen, Some(5000))
    );
    let err = hung.finish(Err(DependencyError("late"))).unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    assert_eq!(
        (
            breaker.status(),
            breaker.open_duration_ms(),
            breaker.reopens()
        ),
        (Status::HalfOpen, Some(5000), 0)
    );
    // The current trial's failure re-opens it, for twice the sleep window.
    second.finish(Err(DependencyError("down"))).unwrap_err();
    assert_eq!(
        (
            breaker.status(),
            breaker.open_duration_ms(),
            breaker.reopens()
        ),
        (Status::Open, Some(10_000), 1)
    );
}

#[test]
fn a_trial_slower_than_a_short_sleep_window_is_waited_for_until_its_timeout() {
    let test = TestRegistry::new();
    let cmd = builder("ShortWindow")
        .circuit_breaker_sleep_window(Duration::from_millis(100))
        .timeout(Duration::from_millis(3000))
        .build_in(test.registry())
        .unwrap();
    trip(&test, &cmd);
    advance_to(&test, 601);
    let mut trial = InFlight::start(&cmd);
    // Past another sleep window, but within the trial's timeout: no second trial.
    advance_to(&test, 3600);
    short_circuited(&cmd);
    advance_to(&test, 3601);
    assert!(trial.poll().unwrap_err().is_timeout());
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    short_circuited(&cmd);
    advance_to(&test, 3702);
    a_trial_succeeds_and_closes(&cmd);
}

#[test]
fn executions_admitted_before_a_transition_never_move_the_breaker_nor_enter_new_health() {
    let test = TestRegistry::new();
    let cmd = builder("Stale")
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let early_success = InFlight::start(&cmd);
    let early_failure = InFlight::start(&cmd);
    trip(&test, &cmd);
    advance_to(&test, 5501);
    let trial = InFlight::start(&cmd);
    // Hystrix's #1853: a success of an older execution closed the breaker. Not here.
    assert_eq!(early_success.finish(Ok(1)).unwrap(), 1);
    assert_eq!(cmd.circuit_breaker().status(), Status::HalfOpen);
    assert_eq!(trial.finish(Ok(2)).unwrap(), 2);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    // An older failure after the close counts in the events, not in the new health counts.
    let err = early_failure
        .finish(Err(DependencyError("late")))
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    advance_to(&test, 6000);
    assert_eq!(cmd.circuit_breaker().health_counts(), health(0, 0, 0));
    assert_eq!(
        cmd.metrics().rolling_count(hystrix::EventType::Failure),
        20 + 1
    );
}

#[test]
fn only_the_half_open_budget_of_trials_runs_and_the_success_threshold_closes() {
    let test = TestRegistry::new();
    let cmd = builder("Budget")
        .property("circuitBreaker.halfOpen.permittedRequests", 3)
        .property("circuitBreaker.halfOpen.successThreshold", 2)
        .build_in(test.registry())
        .unwrap();
    trip(&test, &cmd);
    advance_to(&test, 5501);
    let first = InFlight::start(&cmd);
    let second = InFlight::start(&cmd);
    let third = InFlight::start(&cmd);
    short_circuited(&cmd);
    assert_eq!(first.finish(Ok(1)).unwrap(), 1);
    assert_eq!(cmd.circuit_breaker().status(), Status::HalfOpen);
    // A spent slot is not given back: still no fourth trial.
    short_circuited(&cmd);
    assert_eq!(second.finish(Ok(2)).unwrap(), 2);
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
    // The third trial's failure belongs to the half-open period that ended.
    third.finish(Err(DependencyError("late"))).unwrap_err();
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);
}

#[test]
fn a_stale_trial_failing_later_does_not_extend_the_new_sleep_window() {
    let test = TestRegistry::new();
    let cmd = builder("StaleFailure")
        .timeout_enabled(false)
        .property("circuitBreaker.halfOpen.permittedRequests", 2)
        .build_in(test.registry())
        .unwrap();
    trip(&test, &cmd);
    advance_to(&test, 5501);
    let first = InFlight::start(&cmd);
    let second = InFlight::start(&cmd);
    first.finish(Err(DependencyError("down"))).unwrap_err();
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    advance_to(&test, 8000);
    second.finish(Err(DependencyError("down"))).unwrap_err();
    // The sleep window still runs from 5501 ms.
    advance_to(&test, 10_501);
    short_circuited(&cmd);
    advance_to(&test, 10_502);
    a_trial_succeeds_and_closes(&cmd);
}

#[test]
fn force_closed_lets_everything_run_while_health_still_opens_the_breaker_behind_it() {
    let test = TestRegistry::new();
    let cmd = builder("ForcedClosed").build_in(test.registry()).unwrap();
    test.force_closed("ForcedClosed").unwrap();
    run_many(&cmd, 0, 20);
    advance_to(&test, 500);
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    assert!(!cmd.is_circuit_breaker_open());
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    // forceOpen wins over forceClosed.
    test.force_open("ForcedClosed").unwrap();
    assert!(cmd.is_circuit_breaker_open());
    assert_eq!(
        short_circuited(&cmd).trip_cause().unwrap().to_string(),
        "forced open"
    );
    test.clear_forced("ForcedClosed").unwrap();
    assert!(cmd.is_circuit_breaker_open());
    short_circuited(&cmd);
}

#[test]
fn a_disabled_breaker_at_run_time_allows_everything_and_reports_closed() {
    let test = TestRegistry::new();
    let cmd = builder("Disabled").build_in(test.registry()).unwrap();
    trip(&test, &cmd);
    let enabled = "hystrix.command.Disabled.circuitBreaker.enabled";
    test.registry().properties().set(enabled, false).unwrap();
    assert!(!cmd.is_circuit_breaker_open());
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    test.registry().properties().set(enabled, true).unwrap();
    assert!(cmd.is_circuit_breaker_open());
    short_circuited(&cmd);
}

#[test]
fn the_health_window_forgets_requests_older_than_10_seconds() {
    let test = TestRegistry::new();
    let cmd = builder("Forgets").build_in(test.registry()).unwrap();
    run_many(&cmd, 0, 19);
    advance_to(&test, 10_400);
    run_many(&cmd, 0, 1);
    advance_to(&test, 10_500);
    assert_eq!(cmd.circuit_breaker().health_counts(), health(1, 1, 100));
    assert_eq!(cmd.circuit_breaker().status(), Status::Closed);

    // The same 20 failures within 10 s trip it.
    let test = TestRegistry::new();
    let cmd = builder("Remembers").build_in(test.registry()).unwrap();
    run_many(&cmd, 0, 19);
    advance_to(&test, 9_999);
    run_many(&cmd, 0, 1);
    advance_to(&test, 10_000);
    assert_eq!(cmd.circuit_breaker().health_counts(), health(20, 20, 100));
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
}

#[test]
fn health_checks_once_per_interval_and_a_later_read_catches_up() {
    let test = TestRegistry::new();
    let cmd = builder("Lazy").build_in(test.registry()).unwrap();
    run_many(&cmd, 0, 20);
    // Nobody looks for two seconds; the first look trips it.
    advance_to(&test, 2_250);
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    // A registry read of an unused key is None; of this key, open.
    assert_eq!(test.registry().is_circuit_breaker_open("Nope"), None);
    assert_eq!(test.registry().is_circuit_breaker_open("Lazy"), Some(true));
}

#[test]
fn manual_override_and_every_transition_reach_the_listener() {
    let clock = ManualClock::new();
    let events = Events::default();
    let registry = Registry::builder()
        .clock(clock.clone())
        .circuit_breaker_listener(events.clone())
        .build();
    let cmd = builder("Watched").build_in(&registry).unwrap();
    let breaker = cmd.circuit_breaker();
    let at = |ms: u64| clock.advance(Duration::from_millis(ms - clock.now_ms()));

    run_many(&cmd, 0, 20);
    at(500);
    assert_eq!(breaker.status(), Status::Open);
    at(5501);
    run_many(&cmd, 0, 1);
    at(10_502);
    run_many(&cmd, 1, 0);
    assert_eq!(
        events.take(),
        [
            "Watched opened for 5000 ms: 100% of 20 requests failed in the last 10000 ms \
             (circuitBreaker.errorThresholdPercentage 50%); last failure: FAILURE",
            "Watched half-open",
            "Watched opened for 5000 ms: the half-open trial ended in FAILURE",
            "Watched half-open",
            "Watched closed",
        ]
    );

    // force_open(): OPEN now, for a whole sleep window from now.
    breaker.force_open();
    assert_eq!(breaker.status(), Status::Open);
    assert_eq!(
        breaker.trip_cause().unwrap().to_string(),
        "forced open by force_open() until its sleep window passes"
    );
    at(15_502);
    assert_eq!(
        short_circuited(&cmd).trip_cause().unwrap().to_string(),
        "forced open by force_open() until its sleep window passes"
    );
    // force_close(): closed, health zeroed.
    breaker.force_close();
    assert_eq!(breaker.status(), Status::Closed);
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    // reset(): closed and the trip cause forgotten.
    breaker.force_open();
    breaker.reset();
    assert_eq!(breaker.status(), Status::Closed);
    assert!(breaker.trip_cause().is_none());
    assert_eq!(
        events.take(),
        [
            "Watched forced open",
            "Watched forced closed",
            "Watched forced open",
            "Watched reset"
        ]
    );
}

#[test]
fn a_panicking_listener_does_not_break_the_breaker() {
    struct Panics;
    impl CircuitBreakerListener for Panics {
        fn on_event(&self, _: &CircuitBreakerEvent) {
            panic!("listener bug");
        }
    }
    let clock = ManualClock::new();
    let registry = Registry::builder()
        .clock(clock.clone())
        .circuit_breaker_listener(Panics)
        .build();
    let cmd = builder("Listened").build_in(&registry).unwrap();
    run_many(&cmd, 0, 20);
    clock.advance(Duration::from_millis(500));
    assert_eq!(cmd.circuit_breaker().status(), Status::Open);
    clock.advance(Duration::from_millis(5001));
    a_trial_succeeds_and_closes(&cmd);
}

#[test]
fn clear_forced_also_overrides_flags_from_the_definition() {
    let test = TestRegistry::new();
    let cmd = builder("DefinedOpen")
        .property("circuitBreaker.forceOpen", true)
        .build_in(test.registry())
        .unwrap();
    short_circuited(&cmd);
    test.clear_forced("DefinedOpen").unwrap();
    assert_eq!(cmd.run(ok).execute().unwrap(), 1);
    assert!(test.clear_forced("default").is_err());
}

#[test]
fn a_manual_force_open_names_itself_not_the_sticky_property() {
    let test = hystrix::testing::TestRegistry::new();
    let cmd = common::builder("Manual").build_in(test.registry()).unwrap();
    cmd.circuit_breaker().force_open();
    let err = cmd
        .run(|| Ok::<u32, common::DependencyError>(1))
        .execute()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "command Manual short-circuited (circuit open: forced open by force_open() until its \
         sleep window passes) and no fallback available (tune \
         hystrix.command.Manual.circuitBreaker.sleepWindowInMilliseconds or add a fallback)"
    );
}

/// A short-circuit error names the opening it met, looked up when asked: after the breaker
/// closed and tripped again for another reason, the first error still gives the first cause;
/// a reset forgets them.
#[test]
fn a_short_circuit_error_keeps_the_cause_of_the_opening_it_met() {
    let test = TestRegistry::new();
    let cmd = builder("CauseKept").build_in(test.registry()).unwrap();
    trip(&test, &cmd);
    let first = short_circuited(&cmd);
    let first_cause = first.trip_cause().unwrap().to_string();
    assert!(first_cause.contains("100% of 20 requests"), "{first_cause}");
    advance_to(&test, 5501);
    let err = cmd.run(boom).execute().unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CommandException);
    let second = short_circuited(&cmd);
    assert_eq!(
        second.trip_cause().unwrap().to_string(),
        "the half-open trial ended in FAILURE"
    );
    assert_eq!(first.trip_cause().unwrap().to_string(), first_cause);
    assert!(first.to_string().contains(&first_cause), "{first}");
    cmd.circuit_breaker().reset();
    assert!(first.trip_cause().is_none());
    assert!(second.trip_cause().is_none());
    assert_eq!(
        first.to_string(),
        "command CauseKept short-circuited (circuit open) and no fallback available (tune \
         hystrix.command.CauseKept.circuitBreaker.sleepWindowInMilliseconds or add a fallback)"
    );
}

/// A short-circuited execution's fallback takes time: the execution's total time includes it
/// (the quick refusal reads the clock after the fallback, as the full path does).
#[test]
fn a_short_circuited_execution_lasts_as_long_as_its_fallback() {
    let test = TestRegistry::new();
    let cmd = builder("SlowFallback").build_in(test.registry()).unwrap();
    trip(&test, &cmd);
    let clock = test.clock().clone();
    let outcome = cmd
        .run(ok)
        .fallback(move |_| {
            clock.advance(Duration::from_millis(30));
            Ok::<u32, DependencyError>(7)
        })
        .execute_outcome();
    assert_eq!(
        names(outcome.execution_result().execution_events()),
        ["SHORT_CIRCUITED", "FALLBACK_SUCCESS"]
    );
    assert_eq!(outcome.execution_result().total_time_ms(), 30);
    assert_eq!(outcome.execution_result().execution_time_ms(), None);
    assert_eq!(outcome.into_response().unwrap(), 7);
    advance_to(&test, 1000);
    let metrics = cmd.metrics();
    assert_eq!(metrics.rolling_count(hystrix::EventType::ShortCircuited), 1);
    assert_eq!(
        metrics.rolling_count(hystrix::EventType::FallbackSuccess),
        1
    );
}
