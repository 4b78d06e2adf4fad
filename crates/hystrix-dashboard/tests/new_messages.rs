//! Golden tests of the utilization, configuration and requests messages: exact JSON (key set,
//! order, types and values) for registries and requests driven to known states.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use hystrix::collapser::CollapserScope;
use hystrix::context::RequestContext;
use hystrix::testing::TestRegistry;
use hystrix::{Command, IsolationStrategy};
use hystrix_dashboard::{configuration, requests, utilization};
use serde_json::json;

/// Waits (at most 5 s, real time) until `done` holds.
fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn utilization_counts_the_executions_and_tasks_active_now() {
    let test = TestRegistry::new();
    let props = test.registry().properties();
    props
        .set("hystrix.threadpool.BlockPool.coreSize", 1)
        .unwrap();
    props
        .set("hystrix.threadpool.BlockPool.maxQueueSize", 5)
        .unwrap();
    let blocked = Command::builder("Blocked")
        .group("Shop")
        .thread_pool_key("BlockPool")
        .isolation(IsolationStrategy::Thread)
        .timeout_enabled(false)
        .build_in(test.registry())
        .unwrap();
    let idle = common::semaphore_command(&test, "Idle", "Shop");
    idle.run(|| Ok::<_, common::Boom>(1)).execute().unwrap();

    // Two executions on a pool of one thread: one runs (blocked), the other waits in the queue.
    let (release, wait) = mpsc::channel::<()>();
    let wait = std::sync::Arc::new(std::sync::Mutex::new(wait));
    let start = |wait: std::sync::Arc<std::sync::Mutex<mpsc::Receiver<()>>>| {
        blocked
            .run(move || {
                wait.lock().unwrap().recv().unwrap();
                Ok::<_, common::Boom>(1)
            })
            .queue()
    };
    let first = start(std::sync::Arc::clone(&wait));
    let second = start(std::sync::Arc::clone(&wait));
    // (The pool counts a task active as it takes it; the command, once its run is entered.)
    wait_until("one task running and one queued", || {
        let pool = test.registry().thread_pool_metrics("BlockPool").unwrap();
        let command = test.registry().command_metrics("Blocked").unwrap();
        (pool.current_active_count, pool.current_queue_size) == (1, 1)
            && command.current_concurrent_execution_count() == 1
    });
    assert_eq!(
        utilization::utilization_json(test.registry()),
        json!({
            "type": "HystrixUtilization",
            "commands": {
                "Blocked": {"activeCount": 1},
                "Idle": {"activeCount": 0},
            },
            "threadpools": {
                "BlockPool": {"activeCount": 1, "queueSize": 1, "corePoolSize": 1, "poolSize": 1},
            },
        })
        .to_string()
    );

    release.send(()).unwrap();
    release.send(()).unwrap();
    assert_eq!(first.get().unwrap(), 1);
    assert_eq!(second.get().unwrap(), 1);
    wait_until("the pool idle", || {
        let pool = test.registry().thread_pool_metrics("BlockPool").unwrap();
        let command = test.registry().command_metrics("Blocked").unwrap();
        pool.current_active_count == 0 && command.current_concurrent_execution_count() == 0
    });
    assert_eq!(
        utilization::utilization_json(test.registry()),
        json!({
            "type": "HystrixUtilization",
            "commands": {"Blocked": {"activeCount": 0}, "Idle": {"activeCount": 0}},
            "threadpools": {
                "BlockPool": {"activeCount": 0, "queueSize": 0, "corePoolSize": 1, "poolSize": 1},
            },
        })
        .to_string()
    );
}

#[tokio::test]
async fn config_message_has_every_property_with_its_own_value() {
    let test = TestRegistry::new();
    let props = test.registry().properties();
    let set = |name: &str, value: serde_json::Value| match value {
        serde_json::Value::Bool(b) => props.set(name, b).unwrap(),
        serde_json::Value::Number(n) => props.set(name, n.as_i64().unwrap()).unwrap(),
        _ => unreachable!(),
    };
    // Values chosen to differ from each other and from the defaults, so a field filled from
    // the wrong property shows (Hystrix's isForcedClosed and percentileBucketCount bugs).
    let command = "hystrix.command.Configured.";
    set(
        &format!("{command}execution.isolation.semaphore.maxConcurrentRequests"),
        json!(7),
    );
    set(
        &format!("{command}fallback.isolation.semaphore.maxConcurrentRequests"),
        json!(3),
    );
    set(
        &format!("{command}execution.isolation.thread.interruptOnTimeout"),
        json!(false),
    );
    set(&format!("{command}requestLog.enabled"), json!(false));
    set(&format!("{command}fallback.enabled"), json!(false));
    set(
        &format!("{command}metrics.healthSnapshot.intervalInMilliseconds"),
        json!(250),
    );
    set(
        &format!("{command}metrics.rollingPercentile.numBuckets"),
        json!(12),
    );
    set(
        &format!("{command}metrics.rollingPercentile.enabled"),
        json!(false),
    );
    set(
        &format!("{command}metrics.rollingStats.timeInMilliseconds"),
        json!(20_000),
    );
    set(
        &format!("{command}metrics.rollingStats.numBuckets"),
        json!(5),
    );
    set(
        &format!("{command}circuitBreaker.requestVolumeThreshold"),
        json!(4),
    );
    set(
        &format!("{command}circuitBreaker.errorThresholdPercentage"),
        json!(30),
    );
    set(
        &format!("{command}circuitBreaker.sleepWindowInMilliseconds"),
        json!(2500),
    );
    let pool = "hystrix.threadpool.ShopPool.";
    set(&format!("{pool}coreSize"), json!(4));
    set(&format!("{pool}maximumSize"), json!(8));
    set(
        &format!("{pool}allowMaximumSizeToDivergeFromCoreSize"),
        json!(true),
    );
    set(&format!("{pool}maxQueueSize"), json!(20));
    set(&format!("{pool}queueSizeRejectionThreshold"), json!(15));
    set(&format!("{pool}keepAliveTimeMinutes"), json!(2));
    set(&format!("{pool}metrics.rollingStats.numBuckets"), json!(20));
    let collapser = "hystrix.collapser.GetRating.";
    set(&format!("{collapser}maxRequestsInBatch"), json!(50));
    set(&format!("{collapser}timerDelayInMilliseconds"), json!(20));
    set(&format!("{collapser}requestCache.enabled"), json!(false));
    set(
        &format!("{collapser}metrics.rollingPercentile.numBuckets"),
        json!(3),
    );
    set(
        &format!("{collapser}metrics.rollingPercentile.enabled"),
        json!(false),
    );
    props
        .set(
            "hystrix.command.Overridden.threadPoolKeyOverride",
            "OtherPool",
        )
        .unwrap();

    let configured = Command::builder("Configured")
        .group("Shop")
        .thread_pool_key("ShopPool")
        .isolation(IsolationStrategy::Thread)
        .timeout(Duration::from_millis(250))
        .build_in(test.registry())
        .unwrap();
    configured
        .run(|| Ok::<_, common::Boom>(1))
        .execute()
        .unwrap();
    test.force_open("Configured").unwrap();
    Command::builder("Overridden")
        .group("Other")
        .build_in(test.registry())
        .unwrap();
    common::ratings_collapser(&test, CollapserScope::Global);

    let expected = json!({
        "type": "HystrixConfig",
        "commands": {
            "Configured": {
                "threadPoolKey": "ShopPool",
                "groupKey": "Shop",
                "execution": {
                    "isolationStrategy": "THREAD",
                    "threadPoolKeyOverride": null,
                    "requestCacheEnabled": true,
                    "requestLogEnabled": false,
                    "timeoutEnabled": true,
                    "fallbackEnabled": false,
                    "timeoutInMilliseconds": 250,
                    "semaphoreSize": 7,
                    "fallbackSemaphoreSize": 3,
                    "threadInterruptOnTimeout": false,
                },
                "metrics": {
                    "healthBucketSizeInMs": 250,
                    "percentileBucketSizeInMilliseconds": 5000,
                    "percentileBucketCount": 12,
                    "percentileEnabled": false,
                    "counterBucketSizeInMilliseconds": 4000,
                    "counterBucketCount": 5,
                },
                "circuitBreaker": {
                    "enabled": true,
                    "isForcedOpen": true,
                    "isForcedClosed": false,
                    "requestVolumeThreshold": 4,
                    "errorPercentageThreshold": 30,
                    "sleepInMilliseconds": 2500,
                },
            },
            "GetRatings": default_command("Ratings", "Ratings", "SEMAPHORE", None),
            "Overridden": default_command("OtherPool", "Other", "SEMAPHORE", Some("OtherPool")),
        },
        "threadpools": {
            "ShopPool": {
                "coreSize": 4,
                "maximumSize": 8,
                "actualMaximumSize": 8,
                "maxQueueSize": 20,
                "queueRejectionThreshold": 15,
                "keepAliveTimeInMinutes": 2,
                "allowMaximumSizeToDivergeFromCoreSize": true,
                "counterBucketSizeInMilliseconds": 500,
                "counterBucketCount": 20,
            },
        },
        "collapsers": {
            "GetRating": {
                "maxRequestsInBatch": 50,
                "timerDelayInMilliseconds": 20,
                "requestCacheEnabled": false,
                "metrics": {
                    "percentileBucketSizeInMilliseconds": 20_000,
                    "percentileBucketCount": 3,
                    "percentileEnabled": false,
                    "counterBucketSizeInMilliseconds": 1000,
                    "counterBucketCount": 10,
                },
            },
        },
    });
    assert_eq!(
        configuration::config_json(test.registry()),
        expected.to_string()
    );
}

/// The config of a command with Hystrix's defaults.
fn default_command(
    pool: &str,
    group: &str,
    isolation: &str,
    override_key: Option<&str>,
) -> serde_json::Value {
    json!({
        "threadPoolKey": pool,
        "groupKey": group,
        "execution": {
            "isolationStrategy": isolation,
            "threadPoolKeyOverride": override_key,
            "requestCacheEnabled": true,
            "requestLogEnabled": true,
            "timeoutEnabled": true,
            "fallbackEnabled": true,
            "timeoutInMilliseconds": 1000,
            "semaphoreSize": 10,
            "fallbackSemaphoreSize": 10,
            "threadInterruptOnTimeout": true,
        },
        "metrics": {
            "healthBucketSizeInMs": 500,
            "percentileBucketSizeInMilliseconds": 10_000,
            "percentileBucketCount": 6,
            "percentileEnabled": true,
            "counterBucketSizeInMilliseconds": 1000,
            "counterBucketCount": 10,
        },
        "circuitBreaker": {
            "enabled": true,
            "isForcedOpen": false,
            "isForcedClosed": false,
            "requestVolumeThreshold": 20,
            "errorPercentageThreshold": 50,
            "sleepInMilliseconds": 5000,
        },
    })
}

#[test]
fn config_forced_closed_reads_forced_closed_not_forced_open() {
    let test = TestRegistry::new();
    common::drive_pooled(&test);
    test.force_closed("Pooled").unwrap();
    let message: serde_json::Value =
        serde_json::from_str(&configuration::config_json(test.registry())).unwrap();
    let breaker = &message["commands"]["Pooled"]["circuitBreaker"];
    assert_eq!(breaker["isForcedOpen"], false);
    assert_eq!(breaker["isForcedClosed"], true);
    assert_eq!(
        message["commands"]["Pooled"]["execution"]["isolationStrategy"],
        "THREAD"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_merges_identical_executions_folds_cache_hits_and_shows_batches() {
    let test = TestRegistry::new();
    let get_user = common::semaphore_command(&test, "GetUser", "Users");
    let search = common::semaphore_command(&test, "Search", "Users");
    let rating = common::ratings_collapser(&test, CollapserScope::Request);

    let ctx = RequestContext::new();
    let clock = test.clock().clone();
    let user = |ms: u64| {
        let clock = clock.clone();
        move || {
            clock.advance_ms(ms);
            Ok::<_, common::Boom>("ada")
        }
    };
    {
        let _entered = ctx.enter();
        // u1 runs (12 ms) and is hit 3 times; u2 runs (30 ms) and is hit once.
        get_user.run(user(12)).cache_key("u1").execute().unwrap();
        get_user.run(user(30)).cache_key("u2").execute().unwrap();
        for _ in 0..3 {
            get_user.run(user(99)).cache_key("u1").execute().unwrap();
        }
        get_user.run(user(99)).cache_key("u2").execute().unwrap();
        // A failure with a fallback, then a stream of 3 values and one of 1.
        get_user
            .run(|| Err::<&str, _>(common::Boom))
            .fallback(|_| Ok::<_, common::Boom>("guest"))
            .execute()
            .unwrap();
        for n in [3, 1] {
            let values: Vec<_> = search
                .run_stream(futures_util::stream::iter(
                    (0..n).map(Ok::<u32, common::Boom>),
                ))
                .to_observable()
                .collect()
                .await;
            assert_eq!(values.len(), n as usize);
        }
    }
    // Three requests collapsed into one batch, run in the request's context.
    let answers = ctx
        .scope(async {
            let first = rating.queue(1);
            let second = rating.queue(2);
            let third = rating.queue(3);
            test.clock().advance_ms(20);
            common::within(async { (first.await, second.await, third.await) }).await
        })
        .await;
    assert_eq!(*answers.2.unwrap(), 30);

    let expected = json!([
        {"name": "GetUser", "events": ["SUCCESS"], "latencies": [12, 30], "cached": 4},
        {"name": "GetUser", "events": ["FAILURE", "FALLBACK_SUCCESS"], "latencies": [0]},
        {"name": "Search", "events": [{"name": "EMIT", "count": 3}, "SUCCESS"], "latencies": [0]},
        {"name": "Search", "events": ["EMIT", "SUCCESS"], "latencies": [0]},
        {
            "name": "GetRatings",
            "events": ["SUCCESS"],
            "latencies": [0],
            "collapsed": {"name": "GetRating", "count": 3},
        },
    ]);
    assert_eq!(
        requests::requests_json(&ctx.request_log()),
        expected.to_string()
    );
}

#[test]
fn a_retried_execution_lists_its_repeated_events_with_their_counts() {
    let test = TestRegistry::new();
    // Three attempts of 5 ms, no backoff delay, a budget of exactly 4 retries (1 per second of
    // a 4 s window, no share of requests).
    let cmd = Command::builder("Flaky")
        .group("Shop")
        .isolation(IsolationStrategy::Semaphore)
        .property("retry.maxAttempts", 3)
        .property("retry.backoff.initialInMilliseconds", 0)
        .property("retry.budget.percent", 0)
        .property("retry.budget.minPerSecond", 1)
        .property("retry.budget.windowInMilliseconds", 4_000)
        .build_in(test.registry())
        .unwrap();
    let clock = test.clock().clone();
    // Each execution answers from its script, one entry per attempt (true: Ok).
    let scripted = |script: &'static [bool]| {
        let clock = clock.clone();
        let mut attempt = 0;
        move || {
            let ok = script.get(attempt).copied().unwrap_or(false);
            attempt += 1;
            let clock = clock.clone();
            move || {
                clock.advance_ms(5);
                if ok {
                    Ok::<u32, common::Boom>(1)
                } else {
                    Err(common::Boom)
                }
            }
        }
    };
    let ctx = RequestContext::new();
    {
        let _entered = ctx.enter();
        // Twice FAILUREx2, SUCCESS, RETRYx2 (the budget's 4 retries), then a failure whose
        // retry the budget refuses.
        for _ in 0..2 {
            assert_eq!(
                cmd.run_retryable(scripted(&[false, false, true]))
                    .execute()
                    .unwrap(),
                1
            );
        }
        let value = cmd
            .run_retryable(scripted(&[false, true]))
            .fallback(|_| Ok::<_, common::Boom>(7))
            .execute()
            .unwrap();
        assert_eq!(value, 7);
    }
    // Latencies: the last attempt's run (5 ms) of each execution.
    let expected = json!([
        {
            "name": "Flaky",
            "events": ["SUCCESS", {"name": "FAILURE", "count": 2}, {"name": "RETRY", "count": 2}],
            "latencies": [5, 5],
        },
        {
            "name": "Flaky",
            "events": ["FAILURE", "FALLBACK_SUCCESS", "RETRY_BUDGET_EXHAUSTED"],
            "latencies": [5],
        },
    ]);
    assert_eq!(
        requests::requests_json(&ctx.request_log()),
        expected.to_string()
    );
}
