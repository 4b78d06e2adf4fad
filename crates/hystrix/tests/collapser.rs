//! The request collapser (SPEC §8) on the manual clock: windows, maxRequestsInBatch, mapping
//! and missing responses, batch failures with and without the per-request fallback, shards,
//! duplicates, scopes, cancelled requests, the collapser's request cache, metrics.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use common::{DependencyError, builder};
use futures::executor::block_on;
use hystrix::clock::Clock;
use hystrix::collapser::{CollapsedFuture, Collapser, CollapserEvent, CollapserScope};
use hystrix::context::RequestContext;
use hystrix::testing::TestRegistry;
use hystrix::{Command, EventType, FailureType, SharedResponse};

type Batches = Arc<Mutex<Vec<Vec<u32>>>>;

/// The batch command "GetRatings" and a collapser "GetRating" over it: a rating is id × 10; ids
/// of 900 and above make the batch fail; id 404 has no rating. `batches` records each call.
fn ratings(
    test: &TestRegistry,
    scope: CollapserScope,
    configure: impl FnOnce(
        hystrix::collapser::CollapserBuilder<u32, u32, DependencyError>,
    ) -> hystrix::collapser::CollapserBuilder<u32, u32, DependencyError>,
) -> (Collapser<u32, u32, DependencyError>, Command, Batches) {
    let command = builder("GetRatings").build_in(test.registry()).unwrap();
    let batches: Batches = Arc::default();
    let recorded = Arc::clone(&batches);
    let collapser = configure(Collapser::builder("GetRating").scope(scope))
        .build(
            command.clone(),
            move |ids: Vec<u32>| {
                recorded.lock().unwrap().push(ids.clone());
                async move {
                    if ids.iter().any(|&id| id >= 900) {
                        return Err(DependencyError("ratings down"));
                    }
                    Ok(ids
                        .iter()
                        .filter(|&&id| id != 404)
                        .map(|&id| (id, id * 10))
                        .collect::<HashMap<_, _>>())
                }
            },
            |ratings: &mut HashMap<u32, u32>, id: &u32| ratings.get(id).copied(),
        )
        .unwrap();
    (collapser, command, batches)
}

fn wait(future: CollapsedFuture<u32, DependencyError>) -> SharedResponse<u32, DependencyError> {
    block_on(future)
}

fn value(future: CollapsedFuture<u32, DependencyError>) -> u32 {
    *wait(future).unwrap()
}

#[test]
fn three_requests_in_one_window_are_one_batch_and_three_responses() {
    let test = TestRegistry::new();
    let (collapser, command, batches) = ratings(&test, CollapserScope::Request, |b| b);
    let ctx = RequestContext::new();
    let _entered = ctx.enter();

    let requests: Vec<_> = [1, 2, 3].map(|id| collapser.queue(id)).into();
    assert!(
        batches.lock().unwrap().is_empty(),
        "nothing runs before the window closes"
    );
    test.clock().advance_ms(9);
    assert!(batches.lock().unwrap().is_empty());
    test.clock().advance_ms(1); // timerDelayInMilliseconds = 10
    let values: Vec<u32> = requests.into_iter().map(value).collect();
    assert_eq!(values, [10, 20, 30]);
    assert_eq!(*batches.lock().unwrap(), [vec![1, 2, 3]]);

    let metrics = command.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Success), 1);
    assert_eq!(metrics.cumulative_count(EventType::Collapsed), 3);
    assert_eq!(
        ctx.request_log().to_string(),
        "GetRatings[SUCCESS, COLLAPSEDx3][0ms]",
        "the batch ran in the request's context"
    );
    let log = ctx.request_log();
    let entry = &log.entries()[0];
    assert_eq!(
        entry.collapser_key.as_ref().map(|k| k.as_str()),
        Some("GetRating")
    );
    assert_eq!(entry.events.count(EventType::Collapsed), 3);
    assert!(!entry.is_cache_hit());
    // Collapser metrics: sizes are read from completed buckets (10 s each by default).
    test.clock().advance_ms(10_000);
    let metrics = collapser.metrics();
    assert_eq!(metrics.cumulative_count(CollapserEvent::BatchExecuted), 1);
    assert_eq!(metrics.cumulative_count(CollapserEvent::AddedToBatch), 3);
    assert_eq!(metrics.rolling_count(CollapserEvent::AddedToBatch), 3);
    assert_eq!(
        (metrics.batch_size().p50, metrics.batch_size().p100),
        (3, 3)
    );
    assert_eq!(metrics.shard_size().p100, 3);
    assert_eq!(
        test.registry().collapser_metrics("GetRating"),
        Some(metrics)
    );
}

#[test]
fn windows_follow_the_fixed_rate_ticks() {
    // Hystrix's testRequestsOverTime: requests at 0 and 5 run at 10, at 13 and 19 run at 20,
    // at 27 runs at 30.
    let test = TestRegistry::new();
    let (collapser, _, batches) = ratings(&test, CollapserScope::Global, |b| b);
    let advance_to = |ms: u64| test.clock().advance_ms(ms - test.clock().now_ms());
    for (window, requests) in [
        (10, [(0, 1), (5, 2)].as_slice()),
        (20, &[(13, 3), (19, 4)]),
        (30, &[(27, 5)]),
    ] {
        let mut futures = Vec::new();
        for &(at, id) in requests {
            advance_to(at);
            futures.push(collapser.queue(id));
        }
        advance_to(window - 1);
        assert!(
            futures.iter().all(|f| !f.is_answered()),
            "nothing before the tick at {window}"
        );
        advance_to(window);
        let values: Vec<u32> = futures.into_iter().map(value).collect();
        let expected: Vec<u32> = requests.iter().map(|(_, id)| id * 10).collect();
        assert_eq!(values, expected);
    }
    assert_eq!(*batches.lock().unwrap(), [vec![1, 2], vec![3, 4], vec![5]]);
    // The timer stops at the first tick with nothing to run.
    test.clock().advance_ms(10);
    assert_eq!(test.clock().pending_timers(), 0);
}

#[test]
fn a_full_batch_runs_at_once_and_the_next_request_starts_a_new_one() {
    let test = TestRegistry::new();
    let (collapser, _, batches) = ratings(&test, CollapserScope::Global, |b| {
        b.max_requests_in_batch(2)
    });
    let first = collapser.queue(1);
    let second = collapser.queue(2); // the batch is full: it runs now
    assert_eq!((value(first), value(second)), (10, 20));
    let third = collapser.queue(3);
    test.clock().advance_ms(10);
    assert_eq!(value(third), 30);
    assert_eq!(*batches.lock().unwrap(), [vec![1, 2], vec![3]]);
}

#[test]
fn a_request_the_map_gives_no_response_gets_a_clear_error() {
    let test = TestRegistry::new();
    let (collapser, _, _) = ratings(&test, CollapserScope::Global, |b| b);
    let found = collapser.queue(1);
    let missing = collapser.queue(404);
    test.clock().advance_ms(10);
    assert_eq!(value(found), 10);
    let err = wait(missing).unwrap_err();
    assert_eq!(err.failure_type(), FailureType::CollapserMissingResponse);
    assert_eq!(
        err.to_string(),
        "command GetRatings gave no response for a request of collapser GetRating: its map \
         function returned None for that argument"
    );
}

#[test]
fn a_failed_batch_gives_every_request_its_error_or_the_fallback() {
    let test = TestRegistry::new();
    let (collapser, command, _) = ratings(&test, CollapserScope::Global, |b| b);
    let a = collapser.queue(1);
    let b = collapser.queue(900);
    test.clock().advance_ms(10);
    let (a, b) = (wait(a).unwrap_err(), wait(b).unwrap_err());
    assert!(Arc::ptr_eq(&a, &b), "one shared error");
    assert_eq!(a.failure_type(), FailureType::CommandException);
    assert_eq!(a.cause(), Some(&DependencyError("ratings down")));
    assert_eq!(command.metrics().cumulative_count(EventType::Failure), 1);

    let test = TestRegistry::new();
    let (collapser, _, _) = ratings(&test, CollapserScope::Global, |b| {
        b.fallback(|id, err| {
            assert_eq!(err.failure_type(), FailureType::CommandException);
            id + 1
        })
    });
    let a = collapser.queue(1);
    let b = collapser.queue(900);
    test.clock().advance_ms(10);
    assert_eq!((value(a), value(b)), (2, 901));
}

#[test]
fn a_short_circuited_batch_fails_its_requests_without_running() {
    let test = TestRegistry::new();
    let (collapser, _, batches) = ratings(&test, CollapserScope::Global, |b| b);
    test.force_open("GetRatings").unwrap();
    let request = collapser.queue(1);
    test.clock().advance_ms(10);
    assert_eq!(
        wait(request).unwrap_err().failure_type(),
        FailureType::ShortCircuit
    );
    assert_eq!(
        batches.lock().unwrap().len(),
        1,
        "the batch function made its call's future, which the open breaker never ran"
    );
}

#[test]
fn one_shards_failure_never_touches_another_shards_requests() {
    let test = TestRegistry::new();
    // Shard by hundreds: 1 and 2 together, 900 alone.
    let (collapser, command, batches) = ratings(&test, CollapserScope::Global, |b| {
        b.shard_by(|id| u64::from(*id / 100))
    });
    let requests: Vec<_> = [900, 1, 2].map(|id| collapser.queue(id)).into();
    test.clock().advance_ms(10);
    let responses: Vec<_> = requests.into_iter().map(wait).collect();
    assert_eq!(
        responses[0].as_ref().unwrap_err().failure_type(),
        FailureType::CommandException
    );
    assert_eq!(
        (
            *responses[1].as_ref().unwrap().as_ref(),
            *responses[2].as_ref().unwrap().as_ref()
        ),
        (10, 20)
    );
    // Shards start in the order their first request joined the batch.
    assert_eq!(*batches.lock().unwrap(), [vec![900], vec![1, 2]]);
    let metrics = command.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Success), 1);
    assert_eq!(metrics.cumulative_count(EventType::Failure), 1);
    assert_eq!(metrics.cumulative_count(EventType::Collapsed), 3);
    assert_eq!(
        collapser
            .metrics()
            .cumulative_count(CollapserEvent::BatchExecuted),
        1,
        "one batch, two shards"
    );
}

#[test]
fn duplicate_arguments_share_one_slot_unless_the_cache_is_off() {
    let test = TestRegistry::new();
    let (collapser, _, batches) = ratings(&test, CollapserScope::Global, |b| b);
    let requests: Vec<_> = [5, 5, 6, 5].map(|id| collapser.queue(id)).into();
    test.clock().advance_ms(10);
    let responses: Vec<_> = requests.into_iter().map(|f| wait(f).unwrap()).collect();
    assert_eq!(*batches.lock().unwrap(), [vec![5, 6]]);
    assert!(Arc::ptr_eq(&responses[0], &responses[1]));
    assert!(Arc::ptr_eq(&responses[0], &responses[3]));
    assert_eq!(*responses[2], 60);

    let test = TestRegistry::new();
    let (collapser, _, batches) = ratings(&test, CollapserScope::Global, |b| {
        b.property("requestCache.enabled", false)
    });
    let requests: Vec<_> = [5, 5, 5].map(|id| collapser.queue(id)).into();
    test.clock().advance_ms(10);
    let values: Vec<u32> = requests.into_iter().map(value).collect();
    assert_eq!(values, [50, 50, 50]);
    assert_eq!(*batches.lock().unwrap(), [vec![5, 5, 5]]);
}

#[test]
fn global_scope_mixes_contexts_and_request_scope_keeps_them_apart() {
    // Hystrix's testGlobalScope: 4 requests across two requests → 1 batch of 4.
    let test = TestRegistry::new();
    let (global, _, batches) = ratings(&test, CollapserScope::Global, |b| b);
    let mut futures = Vec::new();
    for ids in [[1, 2], [3, 4]] {
        let ctx = RequestContext::new();
        let _entered = ctx.enter();
        futures.extend(ids.map(|id| global.queue(id)));
    }
    futures.push(global.queue(5)); // no context at all
    test.clock().advance_ms(10);
    let values: Vec<u32> = futures.into_iter().map(value).collect();
    assert_eq!(values, [10, 20, 30, 40, 50]);
    assert_eq!(*batches.lock().unwrap(), [vec![1, 2, 3, 4, 5]]);

    let test = TestRegistry::new();
    let (per_request, _, batches) = ratings(&test, CollapserScope::Request, |b| b);
    let mut futures = Vec::new();
    for ids in [[1, 2], [3, 4]] {
        let ctx = RequestContext::new();
        let _entered = ctx.enter();
        futures.extend(ids.map(|id| per_request.queue(id)));
    }
    test.clock().advance_ms(10);
    let values: Vec<u32> = futures.into_iter().map(value).collect();
    assert_eq!(values, [10, 20, 30, 40]);
    let mut seen = batches.lock().unwrap().clone();
    seen.sort();
    assert_eq!(seen, [vec![1, 2], vec![3, 4]]);

    // REQUEST scope without a context: the clear error.
    let err = wait(per_request.queue(1)).unwrap_err();
    assert_eq!(err.failure_type(), FailureType::NoRequestContext);
    assert!(
        err.to_string().starts_with(
            "command GetRating (a collapser) has REQUEST scope (batches one request's calls), \
             but no request context is current"
        ),
        "{err}"
    );
}

#[test]
fn a_cancelled_request_leaves_its_batch_and_the_others_answers_intact() {
    let test = TestRegistry::new();
    let (collapser, command, batches) = ratings(&test, CollapserScope::Global, |b| b);
    let kept = collapser.queue(1);
    let dropped = collapser.queue(2);
    let duplicate_kept = collapser.queue(3);
    let duplicate_dropped = collapser.queue(3);
    drop(dropped);
    drop(duplicate_dropped);
    test.clock().advance_ms(10);
    assert_eq!((value(kept), value(duplicate_kept)), (10, 30));
    assert_eq!(*batches.lock().unwrap(), [vec![1, 3]]);

    // Every request left: no batch runs.
    drop(collapser.queue(7));
    test.clock().advance_ms(10);
    assert_eq!(batches.lock().unwrap().len(), 1);
    assert_eq!(command.metrics().cumulative_count(EventType::Success), 1);
}

#[test]
fn the_collapser_request_cache_answers_a_repeated_key_without_a_batch() {
    let test = TestRegistry::new();
    let (collapser, _, batches) = ratings(&test, CollapserScope::Request, |b| {
        b.cache_key(|id| id.to_string())
    });
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    let first = collapser.queue(1);
    test.clock().advance_ms(10);
    let first = wait(first).unwrap();
    let failing = collapser.queue(900);
    test.clock().advance_ms(10);
    let failed = wait(failing).unwrap_err();
    // Later, in the same request: both answered from the cache, no new batch.
    let again = wait(collapser.queue(1)).unwrap();
    let failed_again = wait(collapser.queue(900)).unwrap_err();
    assert!(Arc::ptr_eq(&first, &again));
    assert!(
        Arc::ptr_eq(&failed, &failed_again),
        "a failed batch is cached too"
    );
    assert_eq!(batches.lock().unwrap().len(), 2);
    test.clock().advance_ms(10_000);
    let metrics = collapser.metrics();
    assert_eq!(
        metrics.cumulative_count(CollapserEvent::ResponseFromCache),
        2
    );
    assert_eq!(metrics.cumulative_count(CollapserEvent::AddedToBatch), 2);

    // Another request: its own cache.
    let other = RequestContext::new();
    let _in_other = other.enter();
    let fresh = collapser.queue(1);
    test.clock().advance_ms(10);
    assert_eq!(value(fresh), 10);
    assert_eq!(batches.lock().unwrap().len(), 3);
}

#[test]
fn collapser_properties_are_validated_and_change_at_run_time() {
    let test = TestRegistry::new();
    let command = builder("Batch").build_in(test.registry()).unwrap();
    let err = Collapser::builder::<u32, u32, DependencyError>("Bad")
        .property("timerDelayInMilliseconds", 0)
        .build(
            command.clone(),
            |ids: Vec<u32>| async move { Ok::<_, DependencyError>(ids) },
            |_: &mut Vec<u32>, id: &u32| Some(*id),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid value `0` for `hystrix.collapser.Bad.timerDelayInMilliseconds`: must be at \
         least 1 ms"
    );

    let (collapser, _, batches) = ratings(&test, CollapserScope::Global, |b| b);
    test.registry()
        .properties()
        .set("hystrix.collapser.GetRating.maxRequestsInBatch", 1)
        .unwrap();
    test.registry()
        .properties()
        .set("hystrix.collapser.GetRating.timerDelayInMilliseconds", 50)
        .unwrap();
    assert_eq!(collapser.properties().max_requests_in_batch, 1);
    assert_eq!(value(collapser.queue(1)), 10, "a batch of one runs at once");
    test.registry()
        .properties()
        .unset("hystrix.collapser.GetRating.maxRequestsInBatch")
        .unwrap();
    let later = collapser.queue(2);
    test.clock().advance_ms(49);
    assert_eq!(batches.lock().unwrap().len(), 1);
    test.clock().advance_ms(1);
    assert_eq!(value(later), 20);
    assert_eq!(*batches.lock().unwrap(), [vec![1], vec![2]]);
}

/// A stream collapser "GetEpisodes" over the stream command "ListEpisodes": for show ids, a
/// stream of (show, episode) values; show 900 makes the stream fail after its first value.
fn episodes(
    test: &TestRegistry,
    configure: impl FnOnce(
        hystrix::collapser::CollapserBuilder<u32, (u32, String), DependencyError>,
    )
        -> hystrix::collapser::CollapserBuilder<u32, (u32, String), DependencyError>,
) -> (
    hystrix::collapser::StreamCollapser<u32, (u32, String), DependencyError>,
    Command,
    Batches,
) {
    let command = builder("ListEpisodes").build_in(test.registry()).unwrap();
    let batches: Batches = Arc::default();
    let recorded = Arc::clone(&batches);
    let collapser = configure(Collapser::builder("GetEpisodes").scope(CollapserScope::Global))
        .build_stream(
            command.clone(),
            move |shows: Vec<u32>| {
                recorded.lock().unwrap().push(shows.clone());
                let mut items = Vec::new();
                for &show in &shows {
                    for episode in 1..=show.min(2) {
                        items.push(Ok((show, format!("s{show}e{episode}"))));
                    }
                    if show >= 900 {
                        items.push(Err(DependencyError("listing failed")));
                    }
                }
                futures::stream::iter(items)
            },
            |(show, _): &(u32, String)| *show,
            |show: &u32| *show,
        )
        .unwrap();
    (collapser, command, batches)
}

fn items(
    stream: hystrix::collapser::CollapsedStream<(u32, String), DependencyError>,
) -> Vec<String> {
    futures::executor::block_on_stream(stream)
        .map(|item| match item {
            Ok(value) => value.1.clone(),
            Err(err) => format!("error: {}", err.failure_type()),
        })
        .collect()
}

#[test]
fn a_stream_collapser_routes_each_value_to_the_requests_of_its_key() {
    let test = TestRegistry::new();
    let (collapser, command, batches) = episodes(&test, |b| b);
    let one = collapser.queue(1);
    let two = collapser.queue(2);
    let two_again = collapser.queue(2);
    let none = collapser.queue(0); // show 0 has no episodes
    test.clock().advance_ms(10);
    assert_eq!(items(one), ["s1e1"]);
    assert_eq!(items(two), ["s2e1", "s2e2"]);
    assert_eq!(
        items(two_again),
        ["s2e1", "s2e2"],
        "duplicates each get every value"
    );
    assert!(items(none).is_empty(), "no value: an empty stream");
    assert_eq!(
        *batches.lock().unwrap(),
        [vec![1, 2, 0]],
        "duplicate arguments sent once"
    );
    let metrics = command.metrics();
    assert_eq!(metrics.cumulative_count(EventType::Emit), 3);
    assert_eq!(metrics.cumulative_count(EventType::Success), 1);
    assert_eq!(
        metrics.cumulative_count(EventType::Collapsed),
        4,
        "four requests collapsed"
    );
    assert_eq!(
        collapser
            .metrics()
            .cumulative_count(CollapserEvent::AddedToBatch),
        4
    );
}

#[test]
fn a_stream_collapser_can_make_a_missing_response_an_error_and_shares_a_batch_error() {
    let test = TestRegistry::new();
    let (collapser, _, _) = episodes(&test, |b| b.missing_response_is_error());
    let none = collapser.queue(0);
    let one = collapser.queue(1);
    test.clock().advance_ms(10);
    assert_eq!(items(none), ["error: COLLAPSER_MISSING_RESPONSE"]);
    assert_eq!(items(one), ["s1e1"]);

    // The batch fails after show 1's value: values before the error stay delivered, then
    // every request gets the error (or the per-request fallback's value).
    let (collapser, _, _) = episodes(&test, |b| b);
    let one = collapser.queue(1);
    let broken = collapser.queue(900);
    test.clock().advance_ms(10);
    assert_eq!(items(one), ["s1e1", "error: COMMAND_EXCEPTION"]);
    assert_eq!(
        items(broken),
        ["s900e1", "s900e2", "error: COMMAND_EXCEPTION"]
    );
}

#[test]
fn callers_of_a_batch_cut_short_by_shutdown_are_answered() {
    use std::time::Duration;
    let clock = hystrix::clock::ManualClock::new();
    let registry = hystrix::Registry::builder()
        .clock(clock.clone())
        .shutdown_timeout(Duration::from_millis(100))
        .build();
    let command = builder("Slow").build_in(&registry).unwrap();
    let started = Arc::new(std::sync::Barrier::new(2));
    let in_batch = Arc::clone(&started);
    let collapser = Collapser::builder("SlowOne")
        .scope(CollapserScope::Global)
        .build(
            command,
            move |ids: Vec<u32>| {
                let in_batch = Arc::clone(&in_batch);
                async move {
                    in_batch.wait();
                    std::future::pending::<()>().await; // never answers
                    Ok::<_, DependencyError>(ids)
                }
            },
            |ids: &mut Vec<u32>, id: &u32| ids.contains(id).then_some(*id),
        )
        .unwrap();
    let request = collapser.queue(1);
    clock.advance_ms(10);
    started.wait(); // the batch runs on the executor
    registry.shutdown(); // drops the batch's task after 100 ms
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(block_on(request)).unwrap());
    let answer = rx.recv_timeout(Duration::from_secs(10)).expect("answered");
    let err = answer.unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Cancelled);
    assert!(
        err.to_string().contains("ended without answering it"),
        "{err}"
    );
}

#[test]
fn a_cache_hit_keeps_its_batch_running_after_the_first_request_left() {
    let test = TestRegistry::new();
    let (collapser, _, batches) = ratings(&test, CollapserScope::Request, |b| {
        b.cache_key(|id| id.to_string())
    });
    let ctx = RequestContext::new();
    let _entered = ctx.enter();
    let first = collapser.queue(7);
    let hit = collapser.queue(7);
    drop(first);
    test.clock().advance_ms(10);
    assert_eq!(value(hit), 70);
    assert_eq!(*batches.lock().unwrap(), [vec![7]]);
}

#[test]
fn added_to_batch_counts_the_requests_a_batch_ran_with() {
    let test = TestRegistry::new();
    let (collapser, command, _) = ratings(&test, CollapserScope::Global, |b| b);
    let mut requests = [1, 2, 5, 5, 5].map(|id| collapser.queue(id)).into_iter();
    let one = requests.next().unwrap();
    drop(requests.next()); // 2 leaves
    drop(requests.next()); // one of the 5s leaves; its slot stays for the others
    let fives: Vec<_> = requests.collect();
    test.clock().advance_ms(10);
    assert_eq!(value(one), 10);
    assert!(fives.into_iter().all(|five| value(five) == 50));
    drop(collapser.queue(9)); // left before its window: no batch, not counted
    test.clock().advance_ms(10);
    let metrics = collapser.metrics();
    assert_eq!(metrics.cumulative_count(CollapserEvent::AddedToBatch), 2);
    assert_eq!(metrics.cumulative_count(CollapserEvent::BatchExecuted), 1);
    assert_eq!(command.metrics().cumulative_count(EventType::Collapsed), 2);
}

#[test]
fn definitions_of_one_collapser_key_share_its_batches() {
    let test = TestRegistry::new();
    // Hystrix's idiom: a collapser object per request, one batcher per key.
    let (first, _, batches) = ratings(&test, CollapserScope::Global, |b| b);
    let (second, _, unused) = ratings(&test, CollapserScope::Global, |b| b);
    let a = first.queue(1);
    let b = second.queue(2);
    test.clock().advance_ms(10);
    assert_eq!((value(a), value(b)), (10, 20));
    assert_eq!(
        *batches.lock().unwrap(),
        [vec![1, 2]],
        "one batch, the first definition's"
    );
    assert!(unused.lock().unwrap().is_empty());

    let command = builder("GetRatings").build_in(test.registry()).unwrap();
    let err = Collapser::builder::<u32, u32, DependencyError>("GetRating")
        .scope(CollapserScope::Request)
        .build(
            command,
            |ids: Vec<u32>| async move { Ok::<_, DependencyError>(ids) },
            |_: &mut Vec<u32>, id: &u32| Some(*id),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "command `GetRating` is already defined with a different collapser scope: first \
         `Global`, now `Request`"
    );
}

#[test]
fn a_blocking_execute_inside_a_current_thread_runtime_is_refused() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let registry = hystrix::Registry::builder()
        .executor(runtime.handle().clone())
        .build();
    let command = builder("Batch").build_in(&registry).unwrap();
    let collapser = Collapser::builder("Inline")
        .scope(CollapserScope::Global)
        .build(
            command,
            |ids: Vec<u32>| async move { Ok::<_, DependencyError>(ids) },
            |ids: &mut Vec<u32>, id: &u32| ids.contains(id).then_some(*id),
        )
        .unwrap();
    let err = runtime
        .block_on(async { collapser.execute(1) })
        .unwrap_err();
    assert_eq!(err.failure_type(), FailureType::Misuse);
}
