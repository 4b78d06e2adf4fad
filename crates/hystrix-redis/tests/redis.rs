//! RedisStateStore against a real redis-server (one per test, started by the test).
//!
//! Two stores (or two registries) in one process stand in for two instances. Time is real:
//! waits poll until a condition holds, with generous bounds (the machines are shared and
//! noisy); the measured times are printed (`--nocapture`) for the record.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use common::server::{RedisServer, runtime};
use hystrix::circuit::store::{HealthDelta, SharedStatus, SharedView, StateStore, StateStoreError};
use hystrix::{CommandKey, Registry};
use hystrix_redis::RedisStateStore;
use tokio::runtime::Runtime;

fn key(name: &str) -> CommandKey {
    CommandKey::new(name).unwrap()
}

/// A store of service `svc` with test-friendly timeouts (generous for a noisy machine).
fn store(rt: &Runtime, server: &RedisServer) -> RedisStateStore {
    builder(rt, server).build().unwrap()
}

fn builder(rt: &Runtime, server: &RedisServer) -> hystrix_redis::RedisStateStoreBuilder {
    RedisStateStore::builder(server.url(), "svc")
        .connect_timeout(Duration::from_millis(100))
        .response_timeout(Duration::from_millis(100))
        .reconnect_backoff(Duration::from_millis(20), Duration::from_millis(200))
        .runtime(rt.handle().clone())
}

fn delta(command: &str, instance: &str, requests: u64, errors: u64) -> HealthDelta {
    HealthDelta {
        command_key: key(command),
        instance: Arc::from(instance),
        requests,
        errors,
    }
}

/// Polls `done` until it holds; panics after `within`. Returns the time it took.
fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !done() {
        assert!(
            start.elapsed() < within,
            "timed out after {within:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    start.elapsed()
}

/// Every key in the server with its PTTL.
fn ttls(rt: &Runtime, server: &RedisServer) -> Vec<(String, i64)> {
    rt.block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let mut con = client.get_multiplexed_async_connection().await.unwrap();
        let mut keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut con)
            .await
            .unwrap();
        keys.sort();
        let mut out = Vec::new();
        for key in keys {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(&key)
                .query_async(&mut con)
                .await
                .unwrap();
            out.push((key, ttl));
        }
        out
    })
}

// ------------------------------------------------------------------------------------------------
// The store's calls, as the trait documents them

#[test]
fn an_unknown_command_reads_closed_at_generation_zero_and_writes_nothing() {
    let server = RedisServer::start();
    let rt = runtime();
    let store = store(&rt, &server);
    let k = key("Never");
    assert_eq!(rt.block_on(store.fetch(&k)).unwrap(), SharedView::default());
    assert_eq!(rt.block_on(store.close(&k, 0)).unwrap(), None);
    assert_eq!(server.command(&["DBSIZE"]), ":0");
}

#[test]
fn trips_compare_the_generation_and_open_counts_down_on_the_server() {
    let server = RedisServer::start();
    let rt = runtime();
    let (a, b) = (store(&rt, &server), store(&rt, &server));
    let k = key("GetUser");
    assert_eq!(rt.block_on(a.try_trip(&k, 1, 5_000)).unwrap(), None);
    assert_eq!(rt.block_on(a.try_trip(&k, 0, 5_000)).unwrap(), Some(1));
    // Another instance with the generation it had, and the winner again while open: refused.
    assert_eq!(rt.block_on(b.try_trip(&k, 0, 5_000)).unwrap(), None);
    assert_eq!(rt.block_on(b.try_trip(&k, 1, 5_000)).unwrap(), None);
    let view = rt.block_on(b.fetch(&k)).unwrap();
    assert_eq!(view.generation, 1);
    match view.status {
        SharedStatus::Open { remaining_ms } => {
            assert!((4_000..=5_000).contains(&remaining_ms), "{remaining_ms}");
        }
        other => panic!("expected Open, got {other:?}"),
    }

    // A short open period ends by its TTL: HalfOpen, same generation; a trip starts another.
    let short = key("Short");
    assert_eq!(rt.block_on(a.try_trip(&short, 0, 150)).unwrap(), Some(1));
    wait_until("the open period to end", Duration::from_secs(5), || {
        rt.block_on(b.fetch(&short)).unwrap().status == SharedStatus::HalfOpen
    });
    assert_eq!(rt.block_on(b.fetch(&short)).unwrap().generation, 1);
    assert_eq!(rt.block_on(b.try_trip(&short, 1, 5_000)).unwrap(), Some(2));
}

#[test]
fn exactly_one_instance_gets_the_probe_permit() {
    let server = RedisServer::start();
    let rt = runtime();
    let (a, b) = (store(&rt, &server), store(&rt, &server));
    let k = key("GetUser");
    assert_eq!(rt.block_on(a.try_trip(&k, 0, 150)).unwrap(), Some(1));
    // Refused while OPEN.
    assert!(!rt.block_on(a.try_acquire_probe(&k, "a", 60_000)).unwrap());
    wait_until("HalfOpen", Duration::from_secs(5), || {
        rt.block_on(a.fetch(&k)).unwrap().status == SharedStatus::HalfOpen
    });
    // 20 instances over two connections ask at once: one permit.
    let granted = rt.block_on(async {
        let mut asks = Vec::new();
        for i in 0..20 {
            let store = if i % 2 == 0 { a.clone() } else { b.clone() };
            let k = k.clone();
            asks.push(tokio::spawn(async move {
                let instance = format!("i{i}");
                store
                    .try_acquire_probe(&k, &instance, 60_000)
                    .await
                    .unwrap()
            }));
        }
        let mut granted = 0;
        for ask in asks {
            granted += u32::from(ask.await.unwrap());
        }
        granted
    });
    assert_eq!(granted, 1);
    // The close drops the permit: b gets one at once.
    assert_eq!(rt.block_on(b.close(&k, 0)).unwrap(), None);
    assert_eq!(rt.block_on(b.close(&k, 1)).unwrap(), Some(2));
    assert_eq!(rt.block_on(b.close(&k, 2)).unwrap(), None, "already Closed");
    assert!(rt.block_on(b.try_acquire_probe(&k, "b", 200)).unwrap());
    assert!(
        rt.block_on(b.try_acquire_probe(&k, "b", 200)).unwrap(),
        "its holder renews"
    );
    assert!(!rt.block_on(a.try_acquire_probe(&k, "a", 200)).unwrap());
    // It expires with its TTL.
    wait_until("the permit to expire", Duration::from_secs(5), || {
        rt.block_on(a.try_acquire_probe(&k, "a", 60_000)).unwrap()
    });
}

#[test]
fn published_counts_sum_over_instances_age_out_and_restart_at_a_close() {
    let server = RedisServer::start();
    let rt = runtime();
    let store = builder(&rt, &server)
        .window(Duration::from_millis(400), 4)
        .build()
        .unwrap();
    let (get, put) = (key("GetUser"), key("PutUser"));
    rt.block_on(store.publish(&[
        delta("GetUser", "a", 10, 2),
        delta("GetUser", "b", 5, 5),
        delta("PutUser", "a", 7, 0),
    ]))
    .unwrap();
    let view = rt.block_on(store.fetch(&get)).unwrap();
    assert_eq!((view.requests, view.errors, view.reporters), (15, 7, 2));
    let view = rt.block_on(store.fetch(&put)).unwrap();
    assert_eq!((view.requests, view.errors, view.reporters), (7, 0, 1));
    wait_until(
        "the counts to leave the window",
        Duration::from_secs(5),
        || rt.block_on(store.fetch(&get)).unwrap() == SharedView::default(),
    );

    rt.block_on(store.publish(&[delta("PutUser", "a", 3, 3)]))
        .unwrap();
    assert_eq!(
        rt.block_on(store.try_trip(&put, 0, 60_000)).unwrap(),
        Some(1)
    );
    assert_eq!(rt.block_on(store.close(&put, 1)).unwrap(), Some(2));
    let view = rt.block_on(store.fetch(&put)).unwrap();
    assert_eq!((view.requests, view.reporters, view.generation), (0, 0, 2));
}

#[test]
fn every_key_carries_a_ttl() {
    let server = RedisServer::start();
    let rt = runtime();
    let store = store(&rt, &server);
    let (k, other) = (key("GetUser"), key("Other"));
    rt.block_on(async {
        store
            .publish(&[delta("GetUser", "a", 1, 1), delta("Other", "a", 1, 0)])
            .await
            .unwrap();
        assert_eq!(store.try_trip(&k, 0, 100).await.unwrap(), Some(1));
        assert_eq!(store.try_trip(&other, 0, 60_000).await.unwrap(), Some(1));
    });
    wait_until("HalfOpen", Duration::from_secs(5), || {
        rt.block_on(store.try_acquire_probe(&k, "a", 30_000))
            .unwrap()
    });
    let ttls = ttls(&rt, &server);
    let names: Vec<&str> = ttls.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(names.len(), 6, "{names:?}");
    for expected in [
        "hystrix:{svc:GetUser}:state",
        "hystrix:{svc:GetUser}:probe",
        "hystrix:{svc:Other}:state",
        "hystrix:{svc:Other}:open",
    ] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    let buckets = names.iter().filter(|n| n.contains("}:b:")).count();
    assert_eq!(buckets, 2, "{names:?}");
    for (key, ttl) in &ttls {
        assert!(*ttl > 0, "{key} has PTTL {ttl}");
    }
}

#[test]
fn instances_with_other_thresholds_are_flagged() {
    let server = RedisServer::start();
    let rt = runtime();
    let (a, b) = (store(&rt, &server), store(&rt, &server));
    let k = key("GetUser");
    a.set_fingerprint(&k, "volume=20");
    b.set_fingerprint(&k, "volume=5");
    rt.block_on(a.publish(&[delta("GetUser", "a", 1, 0)]))
        .unwrap();
    rt.block_on(b.publish(&[delta("GetUser", "b", 1, 0)]))
        .unwrap();
    rt.block_on(a.fetch(&k)).unwrap();
    let flagged = a.fingerprint_mismatches();
    assert_eq!(flagged.len(), 1);
    let m = &flagged[0];
    assert_eq!(
        (
            m.command.as_str(),
            &*m.fingerprint,
            m.instances,
            m.other_instance.as_str(),
            m.other_fingerprint.as_str()
        ),
        ("GetUser", "volume=20", 1, "b", "volume=5")
    );
    // b agrees again: the flag clears at the next fetch that finds no other.
    b.set_fingerprint(&k, "volume=20");
    let other = key("Agreeing");
    a.set_fingerprint(&other, "volume=20");
    b.set_fingerprint(&other, "volume=20");
    rt.block_on(b.publish(&[delta("Agreeing", "b", 1, 0)]))
        .unwrap();
    rt.block_on(a.fetch(&other)).unwrap();
    assert_eq!(
        a.fingerprint_mismatches().len(),
        1,
        "GetUser is still flagged"
    );
}

#[test]
fn trips_and_closes_are_heard_on_the_channel() {
    let server = RedisServer::start();
    let rt = runtime();
    let (a, b) = (store(&rt, &server), store(&rt, &server));
    wait_until("the subscriptions", Duration::from_secs(5), || {
        a.pubsub_connected() && b.pubsub_connected()
    });
    let told = Arc::new(AtomicU32::new(0));
    let counter = Arc::clone(&told);
    a.watch(Arc::new(move || {
        counter.fetch_add(1, Ordering::SeqCst);
        true
    }));
    let k = key("GetUser");
    assert_eq!(rt.block_on(b.try_trip(&k, 0, 60_000)).unwrap(), Some(1));
    wait_until("the trip on the channel", Duration::from_secs(5), || {
        a.transitions_heard() == 1 && told.load(Ordering::SeqCst) == 1
    });
    assert_eq!(rt.block_on(b.close(&k, 1)).unwrap(), Some(2));
    wait_until("the close on the channel", Duration::from_secs(5), || {
        a.transitions_heard() == 2 && told.load(Ordering::SeqCst) == 2
    });
    // Another service's channel is not heard.
    let elsewhere = RedisStateStore::builder(server.url(), "other")
        .runtime(rt.handle().clone())
        .build()
        .unwrap();
    assert_eq!(
        rt.block_on(elsewhere.try_trip(&k, 0, 60_000)).unwrap(),
        Some(1)
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(a.transitions_heard(), 2);
}

// ------------------------------------------------------------------------------------------------
// Two instances: registries on the system clock

/// Health buckets of 100 ms, 5 requests, 50 %, a 400 ms sleep window.
fn shared_command(registry: &Registry) -> hystrix::Command {
    let props = registry.properties();
    for (name, value) in [
        ("metrics.rollingStats.timeInMilliseconds", 1_000),
        ("metrics.healthSnapshot.intervalInMilliseconds", 100),
        ("circuitBreaker.requestVolumeThreshold", 5),
        ("circuitBreaker.sleepWindowInMilliseconds", 400),
    ] {
        props
            .set(&format!("hystrix.command.Shared.{name}"), value)
            .unwrap();
    }
    hystrix::Command::builder("Shared")
        .group("Test")
        .isolation(hystrix::IsolationStrategy::Semaphore)
        .shared_state(true)
        .build_in(registry)
        .unwrap()
}

fn instance(
    rt: &Runtime,
    store: &RedisStateStore,
    name: &str,
    interval: Option<Duration>,
) -> Registry {
    Registry::builder()
        .executor(rt.handle().clone())
        .state_store(store.clone())
        .state_store_sync_interval(interval)
        .state_store_timeout(Duration::from_millis(250))
        .instance_id(name)
        .build()
}

/// Instances a and b (registries on stores `sa` and `sb`), each with the shared command.
fn two_instances(
    rt: &Runtime,
    sa: &RedisStateStore,
    sb: &RedisStateStore,
    interval: Option<Duration>,
) -> (Registry, Registry, hystrix::Command, hystrix::Command) {
    let (a, b) = (
        instance(rt, sa, "a", interval),
        instance(rt, sb, "b", interval),
    );
    let (cmd_a, cmd_b) = (shared_command(&a), shared_command(&b));
    (a, b, cmd_a, cmd_b)
}

fn subscribed(sa: &RedisStateStore, sb: &RedisStateStore) {
    wait_until("the subscriptions", Duration::from_secs(5), || {
        sa.pubsub_connected() && sb.pubsub_connected()
    });
}

#[derive(Debug)]
struct Down;

impl std::fmt::Display for Down {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("down")
    }
}

impl std::error::Error for Down {}

/// One execution, timed: its latency must never include a wait on Redis.
fn timed(cmd: &hystrix::Command, ok: bool) -> (bool, Duration) {
    let start = Instant::now();
    let outcome = cmd
        .run(move || if ok { Ok(1u32) } else { Err(Down) })
        .execute();
    (outcome.is_ok(), start.elapsed())
}

/// Well above a noisy machine's scheduling hiccups, well below any Redis timeout wait.
const CALL_BOUND: Duration = Duration::from_millis(200);

/// Failures until the local breaker opens (each call timed).
fn trip(cmd: &hystrix::Command) {
    wait_until("the local trip", Duration::from_secs(10), || {
        let (_, latency) = timed(cmd, false);
        assert!(latency < CALL_BOUND, "a call took {latency:?}");
        cmd.circuit_breaker().status() == hystrix::Status::Open
    });
}

fn is_open(cmd: &hystrix::Command) -> bool {
    cmd.circuit_breaker().status() == hystrix::Status::Open
}

#[test]
fn a_trip_reaches_the_other_instance_by_polling_within_a_sync_interval() {
    let server = RedisServer::start();
    let rt = runtime();
    let interval = Duration::from_millis(300);
    let polling = |rt: &Runtime| builder(rt, &server).pubsub(false).build().unwrap();
    let (sa, sb) = (polling(&rt), polling(&rt));
    let (_a, _b, cmd_a, cmd_b) = two_instances(&rt, &sa, &sb, Some(interval));
    trip(&cmd_a);
    // A's trip schedules A's round at once; B learns of it at its next poll.
    let took = wait_until("B to open", interval * 4, || is_open(&cmd_b));
    eprintln!("trip propagation by polling (interval {interval:?}): {took:?}");
    assert!(took < interval + Duration::from_millis(700), "{took:?}");
    assert_eq!(sb.transitions_heard(), 0);
}

#[test]
fn a_trip_reaches_the_other_instance_by_pubsub_well_within_the_sync_interval() {
    let server = RedisServer::start();
    let rt = runtime();
    let interval = Duration::from_secs(5);
    let (sa, sb) = (store(&rt, &server), store(&rt, &server));
    let (_a, _b, cmd_a, cmd_b) = two_instances(&rt, &sa, &sb, Some(interval));
    subscribed(&sa, &sb);
    trip(&cmd_a);
    let took = wait_until("B to open", Duration::from_secs(4), || is_open(&cmd_b));
    eprintln!("trip propagation by pub/sub (interval {interval:?}): {took:?}");
    assert!(took < Duration::from_millis(1_500), "{took:?}");
    assert!(sb.transitions_heard() >= 1);
}

/// Two instances whose rounds run on demand only (the test orders them): A tripped, shared,
/// and B opened from the store.
struct Pair {
    /// A's store (B's lives in B's registry).
    sa: RedisStateStore,
    a: Registry,
    b: Registry,
    cmd_a: hystrix::Command,
    cmd_b: hystrix::Command,
}

impl Pair {
    fn tripped_on_a(rt: &Runtime, server: &RedisServer) -> Self {
        let (sa, sb) = (store(rt, server), store(rt, server));
        let (a, b, cmd_a, cmd_b) = two_instances(rt, &sa, &sb, None);
        trip(&cmd_a);
        rt.block_on(a.sync_state_store());
        rt.block_on(b.sync_state_store());
        assert!(is_open(&cmd_b));
        Pair {
            sa,
            a,
            b,
            cmd_a,
            cmd_b,
        }
    }
}

#[test]
fn one_instance_probes_and_its_close_reaches_the_other() {
    let server = RedisServer::start();
    let rt = runtime();
    let Pair {
        sa: _,
        a,
        b,
        cmd_a,
        cmd_b,
    } = Pair::tripped_on_a(&rt, &server);
    // Past both sleep windows (400 ms; B's from the shared open period), A asks first.
    std::thread::sleep(Duration::from_millis(600));
    rt.block_on(a.sync_state_store());
    rt.block_on(b.sync_state_store());
    let runs = Arc::new(AtomicU32::new(0));
    let run = |cmd: &hystrix::Command| {
        let runs = Arc::clone(&runs);
        cmd.run(move || {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok::<u32, Down>(1)
        })
        .execute()
        .is_ok()
    };
    assert!(!run(&cmd_b), "B has no permit: short-circuited");
    assert!(run(&cmd_a), "A holds the permit: its trial runs");
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(cmd_a.circuit_breaker().status(), hystrix::Status::Closed);
    rt.block_on(a.sync_state_store()); // publishes the close
    rt.block_on(b.sync_state_store()); // B is past its window: closed by the store
    assert_eq!(cmd_b.circuit_breaker().status(), hystrix::Status::Closed);
    assert!(run(&cmd_b));
    let status = a.state_store_status().unwrap();
    assert_eq!((status.errors_total, status.degraded), (0, false));
}

// ------------------------------------------------------------------------------------------------
// Redis killed, paused, slowed, restarted, flushed

/// Calls during an outage: every one fast; the breaker trips and recovers on local state.
fn breaker_works_locally(cmd: &hystrix::Command) {
    trip(cmd);
    let recovered = wait_until(
        "a local trial after the sleep window",
        Duration::from_secs(10),
        || {
            let (ok, latency) = timed(cmd, true);
            assert!(latency < CALL_BOUND, "a call took {latency:?}");
            ok
        },
    );
    assert!(recovered >= Duration::from_millis(300), "{recovered:?}");
    assert_eq!(cmd.circuit_breaker().status(), hystrix::Status::Closed);
}

/// A direct store call while Redis is out of reach: an error within `bound`.
fn fails_fast(rt: &Runtime, store: &RedisStateStore, bound: Duration) {
    let start = Instant::now();
    let err = rt.block_on(store.fetch(&key("Shared"))).unwrap_err();
    assert!(start.elapsed() < bound, "{:?}", start.elapsed());
    assert!(
        matches!(
            err,
            StateStoreError::Unavailable(_) | StateStoreError::Timeout(_)
        ),
        "{err:?}"
    );
}

/// A round, timed: with Redis out of reach each call gives up at its time box.
fn timed_round(rt: &Runtime, registry: &Registry) -> Duration {
    let start = Instant::now();
    rt.block_on(registry.sync_state_store());
    start.elapsed()
}

#[test]
fn redis_killed_then_restarted() {
    let mut server = RedisServer::start();
    let rt = runtime();
    let interval = Duration::from_millis(100);
    let (sa, sb) = (store(&rt, &server), store(&rt, &server));
    let (a, b, cmd_a, cmd_b) = two_instances(&rt, &sa, &sb, Some(interval));
    subscribed(&sa, &sb);

    server.kill();
    wait_until("A degraded", Duration::from_secs(5), || {
        a.state_store_status().unwrap().degraded
    });
    wait_until("the subscription lost", Duration::from_secs(5), || {
        !sb.pubsub_connected()
    });
    let round = timed_round(&rt, &a);
    assert!(round < Duration::from_secs(2), "a round took {round:?}");
    breaker_works_locally(&cmd_a);
    assert!(a.state_store_status().unwrap().errors_total >= 1);
    fails_fast(&rt, &sa, Duration::from_millis(500));

    server.restart();
    wait_until("A healthy again", Duration::from_secs(10), || {
        !a.state_store_status().unwrap().degraded && !b.state_store_status().unwrap().degraded
    });
    wait_until("B resubscribed", Duration::from_secs(10), || {
        sb.pubsub_connected() && sb.pubsub_subscriptions() >= 2
    });
    // The shared view and the pushes work again: a trip on A opens B.
    let heard = sb.transitions_heard();
    trip(&cmd_a);
    wait_until("B to open", Duration::from_secs(5), || is_open(&cmd_b));
    wait_until("B to hear it", Duration::from_secs(5), || {
        sb.transitions_heard() > heard
    });
}

#[test]
fn redis_paused_or_slowed_never_holds_a_call_and_recovers() {
    let server = RedisServer::start();
    let rt = runtime();
    let store = store(&rt, &server);
    let registry = instance(&rt, &store, "a", Some(Duration::from_millis(100)));
    let cmd = shared_command(&registry);
    wait_until("a first good round", Duration::from_secs(5), || {
        let status = registry.state_store_status().unwrap();
        status.rounds >= 1 && !status.degraded
    });

    // CLIENT PAUSE: the server holds every client's commands for 1.5 s.
    assert_eq!(server.command(&["CLIENT", "PAUSE", "1500", "ALL"]), "+OK");
    let round = timed_round(&rt, &registry);
    assert!(
        round < Duration::from_millis(1_200),
        "a round took {round:?}"
    );
    assert!(registry.state_store_status().unwrap().degraded);
    breaker_works_locally(&cmd);
    wait_until("recovery after the pause", Duration::from_secs(10), || {
        !registry.state_store_status().unwrap().degraded
    });

    // DEBUG SLEEP: the server answers nobody for 1 s.
    let sleeping = server.sleep_in_background("1");
    std::thread::sleep(Duration::from_millis(50));
    fails_fast(&rt, &store, Duration::from_millis(600));
    let round = timed_round(&rt, &registry);
    assert!(round < Duration::from_millis(900), "a round took {round:?}");
    for _ in 0..20 {
        let (_, latency) = timed(&cmd, true);
        assert!(latency < CALL_BOUND, "a call took {latency:?}");
    }
    sleeping.join().unwrap();
    wait_until("recovery after the sleep", Duration::from_secs(10), || {
        !registry.state_store_status().unwrap().degraded
    });
    assert!(rt.block_on(store.ping()).is_ok());
}

#[test]
fn redis_flushed_reads_closed_and_a_new_trip_is_shared_again() {
    let server = RedisServer::start();
    let rt = runtime();
    let Pair {
        sa,
        a,
        b,
        cmd_a,
        cmd_b,
    } = Pair::tripped_on_a(&rt, &server);

    assert_eq!(server.command(&["FLUSHALL"]), "+OK");
    let view = rt.block_on(sa.fetch(&key("Shared"))).unwrap();
    assert_eq!((view.status, view.generation), (SharedStatus::Closed, 0));
    // Within its own sleep window B stays open: lost shared state closes nothing early.
    rt.block_on(b.sync_state_store());
    assert!(is_open(&cmd_b));

    // Past the sleep window the lost state reads as a close: A closes, then trips again, and
    // the new trip is shared from generation 0; B follows.
    std::thread::sleep(Duration::from_millis(450));
    rt.block_on(a.sync_state_store());
    wait_until("A closed", Duration::from_secs(5), || {
        timed(&cmd_a, true);
        cmd_a.circuit_breaker().status() == hystrix::Status::Closed
    });
    trip(&cmd_a);
    rt.block_on(a.sync_state_store());
    let view = rt.block_on(sa.fetch(&key("Shared"))).unwrap();
    assert!(matches!(view.status, SharedStatus::Open { .. }), "{view:?}");
    assert_eq!(view.generation, 1);
    rt.block_on(b.sync_state_store());
    assert!(is_open(&cmd_b));
    for (key, ttl) in ttls(&rt, &server) {
        assert!(ttl > 0, "{key} has PTTL {ttl}");
    }
}
