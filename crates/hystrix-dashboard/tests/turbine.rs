//! The fleet view: `/turbine.stream?cluster=` over three registries on one ManualClock, each
//! served by its own dashboard on loopback: exact merged values, an instance removed and
//! re-added through the instances file, a silent instance expiring on the clock, an instance
//! that never answers not holding anything up.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Boom, assert_sse_headers, get, runtime, within};
use hystrix::clock::ManualClock;
use hystrix::{Command, IsolationStrategy, Registry};
use hystrix_dashboard::Dashboard;
use hystrix_dashboard::turbine::{Instances, Turbine, TurbineError};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A registry on `clock` whose command `Orders` (group `Shop`, SEMAPHORE) ran `ok`
/// successes and `failed` failures (no fallback), and whose `Pooled` (THREAD, pool `Pool`,
/// core size `core`) ran once.
fn instance(clock: &ManualClock, ok: u32, failed: u32, core: i64) -> Registry {
    let registry = Registry::builder().clock(clock.clone()).build();
    registry
        .properties()
        .set("hystrix.threadpool.Pool.coreSize", core)
        .expect("valid");
    let orders = Command::builder("Orders")
        .group("Shop")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(&registry)
        .expect("command");
    for _ in 0..ok {
        orders.run(|| Ok::<_, Boom>(1)).execute().expect("succeeds");
    }
    for _ in 0..failed {
        orders
            .run(|| Err::<u32, _>(Boom))
            .execute()
            .expect_err("fails");
    }
    let pooled = Command::builder("Pooled")
        .group("Pool")
        .build_in(&registry)
        .expect("command");
    pooled.run(|| Ok::<_, Boom>(1)).execute().expect("succeeds");
    registry
}

/// Serves `registry`'s dashboard (a 20 ms stream interval) on 127.0.0.1; its stream URL.
async fn serve(registry: &Registry) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let dashboard = Dashboard::builder(registry.clone())
        .interval(Duration::from_millis(20))
        .heartbeat(Duration::from_millis(20))
        .build();
    tokio::spawn(dashboard.serve_on(listener));
    format!("http://{addr}/hystrix.stream")
}

/// The merged message for (`kind`, `name`), if any.
fn merged(turbine: &Turbine, kind: &str, name: &str) -> Option<Value> {
    turbine
        .merged("fleet")
        .expect("cluster")
        .iter()
        .map(|m| serde_json::from_str::<Value>(m).expect("JSON"))
        .find(|m| m["type"] == kind && m["name"] == name)
}

fn hosts(turbine: &Turbine, name: &str) -> Option<Value> {
    merged(turbine, "HystrixCommand", name).map(|m| m["reportingHosts"].clone())
}

/// Waits (at most 5 s, polling every 2 ms) until `done` holds; panics naming `what`.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let waited = tokio::time::timeout(Duration::from_secs(5), async {
        while !done() {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "not within 5 s: {what}");
}

/// Replaces the instances file (a new file renamed over it, so that a reader never sees it
/// half written).
fn list(file: &std::path::Path, urls: &[&String]) {
    let text: String = urls.iter().map(|u| format!("{u}\n")).collect();
    let new = file.with_extension("new");
    std::fs::write(&new, format!("# the fleet\n{text}")).expect("write");
    std::fs::rename(&new, file).expect("rename");
}

#[test]
fn three_instances_merge_exactly_and_come_and_go() {
    let clock = ManualClock::new();
    let one = instance(&clock, 2, 1, 4);
    let two = instance(&clock, 4, 0, 6);
    let three = instance(&clock, 1, 2, 8);
    one.properties()
        .set("hystrix.command.Orders.circuitBreaker.forceOpen", true)
        .expect("valid");
    let only_two = Command::builder("OnlyTwo")
        .group("Shop")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(&two)
        .expect("command");
    only_two.run(|| Ok::<_, Boom>(1)).execute().expect("ok");
    // Rolling counts show completed buckets (1 s each), the health counts a snapshot taken
    // every 500 ms.
    clock.advance(Duration::from_millis(1000));

    let dir = std::env::temp_dir().join(format!("hystrix-turbine-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("instances.txt");

    runtime().block_on(async {
        let urls = [serve(&one).await, serve(&two).await, serve(&three).await];
        // An instance that accepts and never answers: it must hold nothing up.
        let hung = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let hung_url = format!("http://{}/hystrix.stream", hung.local_addr().expect("addr"));
        list(&file, &[&urls[0], &urls[1], &urls[2], &hung_url]);
        let turbine = Turbine::builder()
            .cluster("fleet", Instances::file(&file, Duration::from_millis(20)))
            .expect("valid")
            .interval(Duration::from_millis(20))
            .reconnect_backoff(Duration::from_millis(10), Duration::from_millis(50))
            .clock(Arc::new(clock.clone()))
            .build();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(turbine.clone().serve_on(listener));

        // Nothing is read before a client comes.
        assert_eq!(turbine.merged("fleet"), Some(Vec::new()));
        assert_eq!(turbine.instances("fleet"), Some(Vec::new()));
        let mut client = get(addr, "/turbine.stream?cluster=fleet").await;
        assert_sse_headers(&client);
        assert_eq!(
            within(client.next_frame()).await.as_deref(),
            Some("ping: \n\n")
        );
        // A client that keeps reading, as a dashboard does.
        let frames = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
        let kept = Arc::clone(&frames);
        tokio::spawn(async move {
            while let Some(frame) = client.next_frame().await {
                kept.lock().expect("frames").push(frame);
            }
        });

        // Each instance's lines are taken one by one: wait for all three kinds.
        until("three hosts", || {
            hosts(&turbine, "Orders") == Some(json!(3))
                && merged(&turbine, "HystrixThreadPool", "Pool")
                    .is_some_and(|m| m["reportingHosts"] == json!(3))
                && hosts(&turbine, "OnlyTwo") == Some(json!(1))
        })
        .await;
        let orders = merged(&turbine, "HystrixCommand", "Orders").expect("merged");
        // 7 successes and 3 failures over the three; 33 % + 0 % + 66 % of errors summed (the
        // dashboard divides by the hosts); the breaker forced open on one host of three.
        assert_eq!(orders["requestCount"], json!(10));
        assert_eq!(orders["errorCount"], json!(3));
        assert_eq!(orders["rollingCountSuccess"], json!(7));
        assert_eq!(orders["rollingCountFailure"], json!(3));
        assert_eq!(orders["errorPercentage"], json!(33 + 66));
        assert_eq!(
            orders["isCircuitBreakerOpen"],
            json!({"true": 1, "false": 2})
        );
        assert_eq!(
            orders["circuitBreakerStatus"],
            json!({"OPEN": 1, "CLOSED": 2})
        );
        assert_eq!(
            orders["propertyValue_circuitBreakerForceOpen"],
            json!({"true": 1, "false": 2})
        );
        assert_eq!(orders["group"], json!("Shop"));
        assert_eq!(
            orders["propertyValue_metricsRollingStatisticalWindowInMilliseconds"],
            json!(10000)
        );
        assert_eq!(
            orders["propertyValue_executionIsolationStrategy"],
            json!("SEMAPHORE")
        );
        assert_eq!(orders["latencyExecute"]["99.5"], json!(0));
        // Each field is the sum of the three instances' own messages (except the rules above).
        let own: Vec<Value> = [&one, &two, &three]
            .iter()
            .map(|r| {
                serde_json::from_str(
                    &hystrix_dashboard::stream::command_json(r, "Orders").expect("message"),
                )
                .expect("JSON")
            })
            .collect();
        for field in [
            "requestCount",
            "rollingCountSuccess",
            "latencyExecute_mean",
            "currentConcurrentExecutionCount",
        ] {
            let sum: u64 = own.iter().map(|m| m[field].as_u64().expect("number")).sum();
            assert_eq!(orders[field], json!(sum), "{field}");
        }
        let pool = merged(&turbine, "HystrixThreadPool", "Pool").expect("merged");
        assert_eq!(pool["reportingHosts"], json!(3));
        assert_eq!(pool["currentCorePoolSize"], json!(4 + 6 + 8));
        assert_eq!(pool["rollingCountThreadsExecuted"], json!(3));
        // Thread-pool properties are summed: the dashboard divides them by the hosts.
        assert_eq!(
            pool["propertyValue_metricsRollingStatisticalWindowInMilliseconds"],
            json!(30000)
        );
        assert_eq!(hosts(&turbine, "OnlyTwo"), Some(json!(1)));
        let statuses = turbine.instances("fleet").expect("cluster");
        assert_eq!(statuses.len(), 4);
        let reporting: Vec<bool> = statuses.iter().map(|s| s.reporting).collect();
        let hung_status = statuses.iter().find(|s| s.url == hung_url).expect("listed");
        assert!(!hung_status.connected && !hung_status.reporting);
        assert_eq!(reporting.iter().filter(|r| **r).count(), 3);

        // The stream itself has had OnlyTwo (not only a merge read here).
        until("OnlyTwo on the stream", || {
            frames
                .lock()
                .expect("frames")
                .iter()
                .any(|f| f.contains(r#""name":"OnlyTwo""#) && !f.contains("deleteData"))
        })
        .await;

        // Instance two leaves the file: its numbers leave the merge, OnlyTwo is deleted on
        // the stream once.
        list(&file, &[&urls[0], &urls[2], &hung_url]);
        let deleted = r#"data: {"type":"HystrixCommand","name":"OnlyTwo","deleteData":"true"}"#;
        until("OnlyTwo deleted on the stream", || {
            frames
                .lock()
                .expect("frames")
                .iter()
                .any(|f| f.contains(deleted))
        })
        .await;
        until("two hosts", || hosts(&turbine, "Orders") == Some(json!(2))).await;
        let orders = merged(&turbine, "HystrixCommand", "Orders").expect("merged");
        assert_eq!(orders["requestCount"], json!(6));
        assert_eq!(
            orders["isCircuitBreakerOpen"],
            json!({"true": 1, "false": 1})
        );
        assert_eq!(hosts(&turbine, "OnlyTwo"), None);

        // It comes back.
        list(&file, &[&urls[0], &urls[1], &urls[2], &hung_url]);
        until("three hosts again", || {
            hosts(&turbine, "Orders") == Some(json!(3))
        })
        .await;
        assert_eq!(
            merged(&turbine, "HystrixCommand", "Orders").expect("merged")["requestCount"],
            json!(10)
        );
        drop(hung);
    });
}

/// An instance that sends `body` at once and then only pings.
async fn scripted_instance(body: String) -> String {
    scripted_instance_as("text/event-stream", body.into_bytes()).await
}

/// An instance that answers with Content-Type `kind`, sends `body` at once and then only
/// pings.
async fn scripted_instance_as(kind: &'static str, body: Vec<u8>) -> String {
    let body = Arc::new(body);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            let body = Arc::clone(&body);
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut byte = [0u8; 1];
                while !request.ends_with(b"\r\n\r\n") {
                    match socket.read(&mut byte).await {
                        Ok(1) => request.push(byte[0]),
                        _ => return,
                    }
                }
                let head = format!("HTTP/1.1 200 OK\r\ncontent-type: {kind}\r\n\r\n");
                if socket.write_all(head.as_bytes()).await.is_err()
                    || socket.write_all(&body).await.is_err()
                {
                    return;
                }
                while socket.write_all(b"ping: \n\n").await.is_ok() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            });
        }
    });
    format!("http://{addr}/hystrix.stream")
}

#[test]
fn an_instance_that_floods_its_stream_is_read_at_a_bounded_rate() {
    runtime().block_on(async {
        // 25 000 messages at once: 20 000 are taken in the first second, the rest skipped.
        let body: String = (0..25_000)
            .map(|n| {
                format!(
                    "data: {{\"type\":\"HystrixCommand\",\"name\":\"C{}\",\"requestCount\":1}}\n\n",
                    n % 10
                )
            })
            .collect();
        let flood = scripted_instance(body).await;
        let turbine = Turbine::builder()
            .cluster("fleet", Instances::list([&flood]).expect("valid"))
            .expect("valid")
            .build();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(turbine.clone().serve_on(listener));
        let _client = get(addr, "/turbine.stream?cluster=fleet").await;
        let status = || {
            turbine
                .instances("fleet")
                .expect("cluster")
                .into_iter()
                .next()
        };
        until("the second is over", || {
            status().is_some_and(|s| s.last_error.is_some())
        })
        .await;
        let status = status().expect("listed");
        assert_eq!(status.messages, 20_000);
        assert_eq!(
            status.last_error.as_deref(),
            Some("25000 lines in a second: the 5000 past 20000 were skipped")
        );
        assert_eq!(status.records, 10);
    });
}

/// An instance that sends one message and then only pings.
async fn silent_instance() -> String {
    scripted_instance(
        "data: {\"type\":\"HystrixCommand\",\"name\":\"Quiet\",\"requestCount\":5,\"reportingHosts\":1}\n\n"
            .to_owned(),
    )
    .await
}

#[test]
fn an_instance_that_stops_reporting_drops_out_after_the_timeout_on_the_clock() {
    let clock = ManualClock::new();
    let registry = instance(&clock, 1, 0, 2);
    runtime().block_on(async {
        let live = serve(&registry).await;
        let quiet = silent_instance().await;
        let turbine = Turbine::builder()
            .cluster("fleet", Instances::list([&live, &quiet]).expect("valid"))
            .expect("valid")
            .interval(Duration::from_millis(20))
            .instance_timeout(Duration::from_secs(10))
            .clock(Arc::new(clock.clone()))
            .build();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(turbine.clone().serve_on(listener));
        let _client = get(addr, "/turbine.stream?cluster=fleet").await;
        until("quiet", || hosts(&turbine, "Quiet") == Some(json!(1))).await;
        until("live", || hosts(&turbine, "Orders") == Some(json!(1))).await;

        // 9.999 s on the clock: still reporting.
        clock.advance(Duration::from_millis(9_999));
        assert_eq!(hosts(&turbine, "Quiet"), Some(json!(1)));
        // 10 s: the quiet one is out; the live one, whose messages keep coming, stays.
        clock.advance(Duration::from_millis(1));
        assert_eq!(hosts(&turbine, "Quiet"), None);
        until("live after", || hosts(&turbine, "Orders") == Some(json!(1))).await;
        let quiet_status = turbine
            .instances("fleet")
            .expect("cluster")
            .into_iter()
            .find(|s| s.url == quiet)
            .expect("listed");
        assert!(quiet_status.connected, "its pings keep the connection");
        assert!(!quiet_status.reporting);
        assert_eq!(quiet_status.messages, 1);
    });
}

#[test]
fn the_stream_names_its_clusters_when_asked_for_another() {
    let turbine = Turbine::builder()
        .cluster(
            "a",
            Instances::list(["http://127.0.0.1:1/hystrix.stream"]).expect("valid"),
        )
        .expect("valid")
        .cluster("b", Instances::list(Vec::<String>::new()).expect("valid"))
        .expect("valid")
        .build();
    runtime().block_on(async {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(turbine.clone().serve_on(listener));
        let missing = get(addr, "/turbine.stream").await;
        assert_eq!(missing.status, 400);
        assert_eq!(missing.body().await, "add ?cluster=NAME; clusters: a, b");
        let unknown = get(addr, "/turbine.stream?cluster=c").await;
        assert_eq!(unknown.status, 404);
        assert_eq!(unknown.body().await, "unknown cluster `c`; clusters: a, b");
        let mut ok = get(addr, "/turbine.stream?delay=100&cluster=b").await;
        assert_sse_headers(&ok);
        assert_eq!(within(ok.next_frame()).await.as_deref(), Some("ping: \n\n"));
        assert_eq!(turbine.stream_clients("b"), Some(1));
        turbine.shutdown();
        assert_eq!(within(ok.next_frame()).await, None);
        let after = get(addr, "/turbine.stream?cluster=a").await;
        assert_eq!(after.status, 503);
    });
}

#[test]
fn what_an_instance_gets_wrong_shows_in_its_status() {
    runtime().block_on(async {
        let html = scripted_instance_as("text/html", b"<html></html>\n".to_vec()).await;
        let mut bad_utf8 = b"data: {\"type\":\"HystrixCommand\",\"name\":\"".to_vec();
        bad_utf8.extend_from_slice(&[0xff, 0xfe]);
        bad_utf8.extend_from_slice(b"\"}\n\n");
        let not_utf8 = scripted_instance_as("text/event-stream", bad_utf8).await;
        let long = scripted_instance(format!(
            "data: {{\"type\":\"HystrixCommand\",\"name\":\"{}\"}}\n\n",
            "n".repeat(2000)
        ))
        .await;
        let turbine = Turbine::builder()
            .cluster(
                "fleet",
                Instances::list([&html, &not_utf8, &long]).expect("valid"),
            )
            .expect("valid")
            .build();
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(turbine.clone().serve_on(listener));
        let two = get(addr, "/turbine.stream?cluster=fleet&cluster=other").await;
        assert_eq!(two.status, 400);
        assert_eq!(
            two.body().await,
            "give one ?cluster=NAME: a stream is one cluster's"
        );
        let _client = get(addr, "/turbine.stream?cluster=fleet").await;
        let error_of = |url: &str| {
            turbine
                .instances("fleet")
                .expect("cluster")
                .into_iter()
                .find(|s| s.url == url)
                .and_then(|s| s.last_error)
        };
        until("three errors", || {
            [&html, &not_utf8, &long]
                .iter()
                .all(|u| error_of(u).is_some())
        })
        .await;
        assert_eq!(
            error_of(&html).as_deref(),
            Some("answered Content-Type `text/html`, not text/event-stream")
        );
        assert_eq!(
            error_of(&not_utf8).as_deref(),
            Some("a message that is not UTF-8: refused")
        );
        assert_eq!(
            error_of(&long).as_deref(),
            Some("a name or string of 2000 bytes (at most 1024): message refused")
        );
        assert_eq!(turbine.merged("fleet"), Some(Vec::new()));
    });
}

#[test]
fn bad_configuration_is_refused_with_the_reason() {
    let err = Instances::list(["ftp://x/s"]).expect_err("not http");
    assert_eq!(
        err.to_string(),
        "invalid instance URL `ftp://x/s`: scheme `ftp` is not supported (plain http only)"
    );
    let err = Turbine::builder()
        .cluster("a b", Instances::list(Vec::<String>::new()).expect("valid"))
        .expect_err("space");
    assert!(matches!(err, TurbineError::InvalidCluster(ref n) if n == "a b"));
    let err = Turbine::builder()
        .cluster("a", Instances::list(Vec::<String>::new()).expect("valid"))
        .expect("valid")
        .cluster("a", Instances::list(Vec::<String>::new()).expect("valid"))
        .expect_err("twice");
    assert_eq!(err.to_string(), "cluster `a` is defined twice");
}
