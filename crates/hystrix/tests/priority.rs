//! Priorities under pressure: the share of a key's admission bound reserved for its higher
//! classes (`execution.isolation.priority.*.reservedPercentage`), with the fixed semaphore and
//! with an adaptive limit, for async, blocking and waiting executions. Exact values on the
//! manual clock.
#![allow(clippy::unwrap_used)]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use common::{DependencyError, builder, poll_once};
use hystrix::testing::TestRegistry;
use hystrix::{ClassCounts, Command, CommandBuilder, EventType, Outcome, Priority};

type Run = Pin<Box<dyn Future<Output = Result<u32, DependencyError>> + Send>>;

/// An async run that takes `ms` of the registry's clock, then answers `value`.
fn takes(test: &TestRegistry, ms: u64, value: u32) -> Run {
    let clock = std::sync::Arc::clone(test.registry().clock());
    Box::pin(async move {
        hystrix::clock::sleep(&clock, Duration::from_millis(ms)).await;
        Ok(value)
    })
}

type Pending<'c> = Pin<Box<dyn Future<Output = Outcome<u32, DependencyError>> + 'c>>;

/// An execution of `cmd` of class `priority` whose run takes `ms`, polled once: in flight, or
/// ended (refused) with its events.
fn start<'c>(
    test: &TestRegistry,
    cmd: &'c Command,
    priority: Priority,
    ms: u64,
) -> Result<Pending<'c>, String> {
    let mut future: Pending<'c> = Box::pin(
        cmd.run_async(takes(test, ms, 1))
            .priority(priority)
            .execute_async_outcome(),
    );
    match poll_once(future.as_mut()) {
        Poll::Pending => Ok(future),
        Poll::Ready(outcome) => Err(format!(
            "{} | {}",
            outcome.execution_result().execution_events(),
            outcome
                .response()
                .as_ref()
                .err()
                .map(ToString::to_string)
                .unwrap_or_default()
        )),
    }
}

/// Starts `n` executions of class `priority` that must all be admitted.
fn admit<'c>(
    test: &TestRegistry,
    cmd: &'c Command,
    priority: Priority,
    n: usize,
) -> Vec<Pending<'c>> {
    (0..n)
        .map(|i| {
            start(test, cmd, priority, 100)
                .unwrap_or_else(|why| panic!("{priority} #{i} was refused: {why}"))
        })
        .collect()
}

/// The events and message of an execution of class `priority` that must be refused.
fn refused(test: &TestRegistry, cmd: &Command, priority: Priority) -> String {
    match start(test, cmd, priority, 100) {
        Ok(_) => panic!("a {priority} execution was admitted"),
        Err(why) => why,
    }
}

/// A SEMAPHORE command of `max` places with reserves of `critical` and `normal` percent.
fn reserved(key: &str, max: u32, critical: u32, normal: u32) -> CommandBuilder {
    builder(key)
        .semaphore_max_concurrent_requests(max)
        .property(
            "execution.isolation.priority.critical.reservedPercentage",
            critical,
        )
        .property(
            "execution.isolation.priority.normal.reservedPercentage",
            normal,
        )
        .property("execution.isolation.thread.timeoutInMilliseconds", 1_000)
}

fn class(in_flight: u32, admitted: u64, refused: u64) -> ClassCounts {
    ClassCounts {
        in_flight,
        admitted,
        refused,
    }
}

/// Ends every execution: the clock passes their runs' end and each is polled to its outcome.
fn finish_all(test: &TestRegistry, pending: Vec<Pending<'_>>) {
    test.clock().advance(Duration::from_millis(100));
    for mut future in pending {
        let Poll::Ready(outcome) = poll_once(future.as_mut()) else {
            panic!("every run ended at 100 ms")
        };
        assert_eq!(*outcome.response().as_ref().unwrap(), 1);
    }
}

#[test]
fn lower_classes_are_refused_first_and_leave_the_higher_reserves_free() {
    let test = TestRegistry::new();
    // 10 places: 3 (30 %) kept for CRITICAL, 2 (20 %) for NORMAL against SHEDDABLE.
    let cmd = reserved("Shares", 10, 30, 20)
        .build_in(test.registry())
        .unwrap();
    let mut pending = admit(&test, &cmd, Priority::Sheddable, 5);
    let why = refused(&test, &cmd, Priority::Sheddable);
    assert_eq!(
        why,
        "FALLBACK_MISSING, LIMIT_REJECTED | command Shares was refused as a SHEDDABLE \
         execution (5 of 10 places in use; the rest is reserved for higher priorities) and no \
         fallback available (tune hystrix.command.Shares.execution.isolation.priority.\
         {critical,normal}.reservedPercentage or add a fallback)"
    );
    // NORMAL leaves CRITICAL's 3 free: 2 more.
    pending.extend(admit(&test, &cmd, Priority::Normal, 2));
    assert!(refused(&test, &cmd, Priority::Normal).contains("as a NORMAL execution (7 of 10"));
    // NORMAL's reserve is in use now, but SHEDDABLE still leaves CRITICAL's.
    assert!(refused(&test, &cmd, Priority::Sheddable).contains("7 of 10"));
    // CRITICAL has its 3 places at a load that sheds the others.
    pending.extend(admit(&test, &cmd, Priority::Critical, 3));
    let why = refused(&test, &cmd, Priority::Critical);
    assert!(
        why.contains("could not acquire a semaphore for execution (limit of 10 concurrent"),
        "{why}"
    );
    let by_class = cmd.metrics().priorities().unwrap();
    assert_eq!(by_class.critical, class(3, 3, 1));
    assert_eq!(by_class.normal, class(2, 2, 1));
    assert_eq!(by_class.sheddable, class(5, 5, 2));
    assert_eq!(
        (by_class.critical_reserved, by_class.normal_reserved),
        (3, 2)
    );
    // Refused by a reserve: LIMIT_REJECTED (not a health error); at the full bound:
    // SEMAPHORE_REJECTED, as without priorities.
    assert_eq!(cmd.metrics().cumulative_count(EventType::LimitRejected), 3);
    assert_eq!(
        cmd.metrics().cumulative_count(EventType::SemaphoreRejected),
        1
    );
    // Every class gives its places back.
    finish_all(&test, pending);
    let by_class = cmd.metrics().priorities().unwrap();
    assert_eq!(
        [
            by_class.critical.in_flight,
            by_class.normal.in_flight,
            by_class.sheddable.in_flight
        ],
        [0, 0, 0]
    );
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
}

#[test]
fn a_reserve_in_use_is_not_held_twice() {
    let test = TestRegistry::new();
    let cmd = reserved("InUse", 10, 30, 0)
        .build_in(test.registry())
        .unwrap();
    // Two CRITICAL use 2 of their 3 places: one stays held, so NORMAL gets 10 - 2 - 1 = 7.
    let mut pending = admit(&test, &cmd, Priority::Critical, 2);
    pending.extend(admit(&test, &cmd, Priority::Normal, 7));
    assert!(refused(&test, &cmd, Priority::Normal).contains("9 of 10"));
    // Past its reserve CRITICAL takes from the common places: the last one.
    pending.extend(admit(&test, &cmd, Priority::Critical, 1));
    assert!(refused(&test, &cmd, Priority::Critical).contains("limit of 10"));
    finish_all(&test, pending);
}

#[test]
fn without_a_reserve_priorities_change_nothing_and_are_not_counted() {
    let test = TestRegistry::new();
    let cmd = reserved("NoReserve", 3, 0, 0)
        .build_in(test.registry())
        .unwrap();
    let mut pending = admit(&test, &cmd, Priority::Sheddable, 2);
    pending.extend(admit(&test, &cmd, Priority::Normal, 1));
    assert!(refused(&test, &cmd, Priority::Critical).contains("limit of 3"));
    assert!(cmd.metrics().priorities().is_none());
    finish_all(&test, pending);
    // A reserve set later finds no class count left behind.
    test.registry()
        .properties()
        .set(
            "hystrix.command.NoReserve.execution.isolation.priority.critical.reservedPercentage",
            "34",
        )
        .unwrap();
    let by_class = cmd.metrics().priorities().unwrap();
    assert_eq!(by_class.critical, class(0, 0, 0));
    assert_eq!(by_class.sheddable, class(0, 0, 0));
    assert_eq!(by_class.critical_reserved, 2);
}

#[test]
fn with_an_adaptive_limit_the_reserves_are_shares_of_the_limit() {
    let test = TestRegistry::new();
    let cmd = reserved("Adaptive", 100, 50, 0)
        .property("execution.isolation.adaptive.enabled", true)
        .property("execution.isolation.adaptive.algorithm", "AIMD")
        .property("execution.isolation.adaptive.initialLimit", 4)
        .build_in(test.registry())
        .unwrap();
    // A limit of 4: CRITICAL keeps 2 places.
    let mut pending = admit(&test, &cmd, Priority::Normal, 2);
    let why = refused(&test, &cmd, Priority::Normal);
    assert!(
        why.starts_with(
            "FALLBACK_MISSING, LIMIT_REJECTED | command Adaptive was refused as a NORMAL \
             execution (2 of 4"
        ),
        "{why}"
    );
    pending.extend(admit(&test, &cmd, Priority::Critical, 2));
    let why = refused(&test, &cmd, Priority::Critical);
    assert!(
        why.contains("adaptive concurrency limit (4 concurrent"),
        "{why}"
    );
    assert_eq!(cmd.metrics().cumulative_count(EventType::LimitRejected), 2);
    assert_eq!(cmd.metrics().priorities().unwrap().critical_reserved, 2);
    finish_all(&test, pending);
}

/// A command of `reserved` reserves under an adaptive AIMD limit held at 2, whose executions
/// may wait 500 ms for a place.
fn waiting(test: &TestRegistry, key: &str, critical: u32, normal: u32) -> Command {
    reserved(key, 100, critical, normal)
        .property("execution.isolation.adaptive.enabled", true)
        .property("execution.isolation.adaptive.algorithm", "AIMD")
        .property("execution.isolation.adaptive.initialLimit", 2)
        .property("execution.isolation.adaptive.maxLimit", 2)
        .property("execution.isolation.adaptive.maxWaitInMilliseconds", 500)
        .build_in(test.registry())
        .unwrap()
}

#[test]
fn a_waiting_lower_class_gets_a_place_freed_for_it_and_a_critical_call_passes_it() {
    let test = TestRegistry::new();
    let cmd = waiting(&test, "Waiting", 50, 0);
    // A limit of 2, one kept for CRITICAL: one NORMAL runs, a second waits.
    let first = start(&test, &cmd, Priority::Normal, 100).unwrap();
    let mut waiter = start(&test, &cmd, Priority::Normal, 50).unwrap();
    assert_eq!(cmd.metrics().adaptive_limit().unwrap().queued, 1);
    // A CRITICAL call is admitted at once past the waiter.
    let critical = start(&test, &cmd, Priority::Critical, 300).unwrap();
    assert_eq!(cmd.metrics().adaptive_limit().unwrap().in_flight, 2);
    // The first NORMAL ends: its place is NORMAL's again (CRITICAL uses its reserve), the
    // waiter takes it.
    finish_all(&test, vec![first]);
    assert!(poll_once(waiter.as_mut()).is_pending());
    assert_eq!(cmd.metrics().adaptive_limit().unwrap().queued, 0);
    test.clock().advance(Duration::from_millis(50));
    let Poll::Ready(outcome) = poll_once(waiter.as_mut()) else {
        panic!("the waiter ran from 100 to 150 ms")
    };
    assert_eq!(outcome.execution_result().total_time_ms(), 150);
    drop(critical);
    let by_class = cmd.metrics().priorities().unwrap();
    assert_eq!(by_class.normal, class(0, 2, 0));
    assert_eq!(by_class.critical, class(0, 1, 0));
}

#[test]
fn a_freed_place_wakes_the_waiter_it_is_for_not_only_the_longest() {
    let test = TestRegistry::new();
    // A limit of 2, all of it NORMAL's against SHEDDABLE.
    let cmd = waiting(&test, "Wakes", 0, 100);
    let long = start(&test, &cmd, Priority::Normal, 300).unwrap();
    let short = start(&test, &cmd, Priority::Normal, 100).unwrap();
    // The longest waiter is SHEDDABLE, then a NORMAL one.
    let mut sheddable = start(&test, &cmd, Priority::Sheddable, 10).unwrap();
    let mut normal = start(&test, &cmd, Priority::Normal, 10).unwrap();
    assert_eq!(cmd.metrics().adaptive_limit().unwrap().queued, 2);
    // The short NORMAL ends: its place is NORMAL's (one NORMAL left in flight keeps one of
    // the two held), so the NORMAL waiter takes it, though the SHEDDABLE one waited longer.
    finish_all(&test, vec![short]);
    assert!(poll_once(sheddable.as_mut()).is_pending());
    assert!(poll_once(normal.as_mut()).is_pending());
    let limit = cmd.metrics().adaptive_limit().unwrap();
    assert_eq!((limit.in_flight, limit.queued), (2, 1));
    drop((long, sheddable, normal));
}

#[test]
fn a_blocking_execution_counts_its_class_and_gives_it_back() {
    let test = TestRegistry::new();
    let cmd = reserved("Blocking", 2, 50, 0)
        .build_in(test.registry())
        .unwrap();
    // Of 2 places, 1 is CRITICAL's: a blocking SHEDDABLE call has the other.
    let value = cmd
        .run(|| Ok::<_, DependencyError>(7))
        .priority(Priority::Sheddable)
        .execute()
        .unwrap();
    assert_eq!(value, 7);
    let by_class = cmd.metrics().priorities().unwrap();
    assert_eq!(by_class.sheddable, class(0, 1, 0));
    // With a NORMAL call on that place, the blocking call is refused to its fallback.
    let pending = admit(&test, &cmd, Priority::Normal, 1);
    let value = cmd
        .run(|| Ok::<_, DependencyError>(7))
        .fallback(|_| Ok::<_, DependencyError>(0))
        .priority(Priority::Sheddable)
        .execute()
        .unwrap();
    assert_eq!(value, 0);
    assert_eq!(
        cmd.metrics().priorities().unwrap().sheddable,
        class(0, 1, 1)
    );
    finish_all(&test, pending);
    assert_eq!(cmd.metrics().priorities().unwrap().normal, class(0, 1, 0));
}

#[test]
fn a_retried_critical_execution_keeps_its_class_on_every_attempt() {
    let test = TestRegistry::new();
    let cmd = common::retrying(&test, "Retried", 3);
    let props = test.registry().properties();
    props
        .set(
            "hystrix.command.Retried.execution.isolation.priority.critical.reservedPercentage",
            "50",
        )
        .unwrap();
    let mut calls = 0;
    let outcome = common::drive(
        &test,
        cmd.run_async_retryable(move || {
            calls += 1;
            let result = if calls < 3 {
                Err(DependencyError("flaky"))
            } else {
                Ok(calls)
            };
            async move { result }
        })
        .priority(Priority::Critical)
        .execute_async_outcome(),
    );
    assert_eq!(*outcome.response().as_ref().unwrap(), 3);
    assert_eq!(cmd.metrics().priorities().unwrap().critical, class(0, 3, 0));
}

#[test]
fn reserves_are_validated_with_their_names() {
    let test = TestRegistry::new();
    let props = test.registry().properties();
    let err = props
        .set(
            "hystrix.command.Bad.execution.isolation.priority.critical.reservedPercentage",
            "101",
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains(
            "hystrix.command.Bad.execution.isolation.priority.critical.reservedPercentage"
        ),
        "{err}"
    );
    assert!(err.contains("must be a percentage from 0 to 100"), "{err}");
    props
        .set(
            "hystrix.command.Bad.execution.isolation.priority.critical.reservedPercentage",
            "60",
        )
        .unwrap();
    let err = props
        .set(
            "hystrix.command.Bad.execution.isolation.priority.normal.reservedPercentage",
            "50",
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("hystrix.command.Bad.execution.isolation.priority.normal.reservedPercentage"),
        "{err}"
    );
    assert!(
        err.contains(
            "must not pass 100 with execution.isolation.priority.critical.reservedPercentage \
             (60 %): together they are 110 %"
        ),
        "{err}"
    );
}

#[cfg(feature = "tower")]
#[test]
fn the_tower_layer_reads_each_requests_priority() {
    use tower::{Layer, Service, ServiceExt};

    let test = TestRegistry::new();
    let cmd = reserved("Layered", 1, 100, 0)
        .build_in(test.registry())
        .unwrap();
    let inner =
        tower::service_fn(|path: &'static str| async move { Ok::<_, DependencyError>(path.len()) });
    let mut svc = hystrix::tower::HystrixLayer::new(cmd.clone())
        .priority_with(|path: &&'static str| {
            if path.starts_with("/checkout") {
                Priority::Critical
            } else {
                Priority::Normal
            }
        })
        .layer(inner);
    futures::executor::block_on(async {
        // The one place is CRITICAL's: a NORMAL request is refused, a checkout runs.
        let err = svc
            .ready()
            .await
            .unwrap()
            .call("/search")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("as a NORMAL execution"), "{err}");
        assert_eq!(
            svc.ready().await.unwrap().call("/checkout").await.unwrap(),
            9
        );
    });
    let by_class = cmd.metrics().priorities().unwrap();
    assert_eq!(by_class.critical, class(0, 1, 0));
    assert_eq!(by_class.normal, class(0, 0, 1));
}

#[test]
fn a_stream_execution_holds_its_class_while_it_runs() {
    use futures::StreamExt;

    let test = TestRegistry::new();
    let cmd = reserved("Streamed", 2, 50, 0)
        .build_in(test.registry())
        .unwrap();
    let run = || {
        futures::stream::iter([Ok::<u32, DependencyError>(1)])
            .chain(futures::stream::pending())
            .boxed()
    };
    let mut stream = Box::pin(
        cmd.run_stream(run())
            .priority(Priority::Sheddable)
            .to_observable(),
    );
    assert!(matches!(
        poll_once(std::pin::pin!(stream.next())),
        Poll::Ready(Some(Ok(1)))
    ));
    // 1 of 2 places is CRITICAL's, the other held by the stream: another SHEDDABLE one is
    // refused at once.
    let mut refused = Box::pin(
        cmd.run_stream(run())
            .priority(Priority::Sheddable)
            .to_observable(),
    );
    let Poll::Ready(Some(Err(err))) = poll_once(std::pin::pin!(refused.next())) else {
        panic!("refused at once")
    };
    assert!(
        err.to_string().contains("as a SHEDDABLE execution (1 of 2"),
        "{err}"
    );
    assert_eq!(
        cmd.metrics().priorities().unwrap().sheddable,
        class(1, 1, 1)
    );
    drop(stream);
    assert_eq!(
        cmd.metrics().priorities().unwrap().sheddable,
        class(0, 1, 1)
    );
    assert_eq!(cmd.metrics().current_concurrent_execution_count(), 0);
}

#[test]
fn a_reserve_never_shuts_the_lower_classes_out_of_a_limit_of_one() {
    let test = TestRegistry::new();
    // An adaptive limit down to 1 place: 10 % of it rounds up to that place, which would
    // leave NORMAL nothing, and with no NORMAL samples the limit could never grow again.
    let cmd = reserved("Tiny", 100, 10, 0)
        .property("execution.isolation.adaptive.enabled", true)
        .property("execution.isolation.adaptive.algorithm", "AIMD")
        .property("execution.isolation.adaptive.initialLimit", 1)
        .property("execution.isolation.adaptive.windowSize", 1)
        .build_in(test.registry())
        .unwrap();
    for _ in 0..3 {
        let value = cmd
            .run(common::slow(&test, 10, 5))
            .priority(Priority::Normal)
            .execute()
            .unwrap();
        assert_eq!(value, 5);
    }
    assert_eq!(cmd.metrics().priorities().unwrap().normal, class(0, 3, 0));
    // At 1 place nothing was reserved; AIMD grew the limit by one per sample while one in
    // flight was at least half of it: 1, 2, 3.
    assert_eq!(cmd.metrics().adaptive_limit().unwrap().limit, 3);
    assert_eq!(cmd.metrics().priorities().unwrap().critical_reserved, 1);
}

#[test]
fn a_thread_pool_alone_ignores_reserves_and_reports_no_classes() {
    let test = TestRegistry::new();
    let cmd = reserved("Pooled", 10, 30, 20)
        .isolation(hystrix::IsolationStrategy::Thread)
        .build_in(test.registry())
        .unwrap();
    let value = cmd
        .run(|| Ok::<_, DependencyError>(3))
        .priority(Priority::Sheddable)
        .execute()
        .unwrap();
    assert_eq!(value, 3);
    assert!(cmd.metrics().priorities().is_none());
}

#[test]
fn refusals_by_a_reserve_never_open_the_breaker_on_the_class_it_is_for() {
    let test = TestRegistry::new();
    let cmd = reserved("Guarded", 10, 30, 0)
        .build_in(test.registry())
        .unwrap();
    // 7 NORMAL in flight fill what CRITICAL's 3 places leave: 20 more NORMAL are refused.
    let pending = admit(&test, &cmd, Priority::Normal, 7);
    for _ in 0..20 {
        let outcome = cmd
            .run(|| Ok::<_, DependencyError>(1))
            .fallback(|_| Ok::<_, DependencyError>(0))
            .execute_outcome();
        assert_eq!(
            outcome.execution_result().execution_events().to_string(),
            "FALLBACK_SUCCESS, LIMIT_REJECTED"
        );
    }
    test.clock().advance(Duration::from_millis(500));
    assert_eq!(cmd.metrics().health_counts().error_count, 0);
    // The breaker stays closed: CRITICAL gets its place.
    let paid = cmd
        .run(|| Ok::<_, DependencyError>(9))
        .priority(Priority::Critical)
        .execute()
        .unwrap();
    assert_eq!(paid, 9);
    finish_all(&test, pending);
}
