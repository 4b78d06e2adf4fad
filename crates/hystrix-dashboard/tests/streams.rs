//! The utilization, configuration and requests streams over a real socket, and what every
//! stream shares: headers, pings, per-stream connection limits, the stream properties, slow
//! clients and shutdown.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use hystrix::context::RequestContext;
use hystrix::testing::TestRegistry;
use hystrix_dashboard::{Dashboard, StreamKind, configuration, utilization};
use serde_json::{Value, json};

const PING: &str = "ping: \n\n";

/// The JSON of a data frame; `None` for a ping.
fn data(frame: &str) -> Option<String> {
    if frame == PING {
        return None;
    }
    let json = frame
        .strip_prefix("data: ")
        .and_then(|rest| rest.strip_suffix("\n\n"))
        .unwrap_or_else(|| panic!("not an SSE data frame: {frame:?}"));
    assert!(!json.contains('\n'), "single-line JSON");
    Some(json.to_owned())
}

/// The next data frame's JSON (pings skipped), within 5 s.
async fn next_data(response: &mut common::Response) -> String {
    common::within(async {
        loop {
            let frame = response.next_frame().await.expect("the stream ended");
            if let Some(json) = data(&frame) {
                return json;
            }
        }
    })
    .await
}

/// Connects to `path` and checks Hystrix's SSE headers and the ping on connect.
async fn connect(addr: std::net::SocketAddr, path: &str) -> common::Response {
    let mut response = common::within(common::get(addr, path)).await;
    assert_eq!(response.status, 200, "{path}");
    common::assert_sse_headers(&response);
    assert_eq!(
        common::within(response.next_frame()).await.as_deref(),
        Some(PING),
        "{path}: a ping first"
    );
    response
}

/// A client of each stream, in [`StreamKind::ALL`] order.
async fn connect_to_every_stream(addr: std::net::SocketAddr) -> Vec<common::Response> {
    let mut open = Vec::new();
    for stream in StreamKind::ALL {
        open.push(connect(addr, stream.path()).await);
    }
    open
}

/// Waits (at most 5 s) until `stream` has `n` clients.
async fn clients(dashboard: &Dashboard, stream: StreamKind, n: usize) {
    common::eventually(|| dashboard.stream_clients_of(stream) == n).await;
}

async fn refused(addr: std::net::SocketAddr, path: &str) -> String {
    let response = common::within(common::get(addr, path)).await;
    assert_eq!(response.status, 503, "{path}");
    common::within(response.body()).await
}

#[test]
fn utilization_and_config_streams_send_their_messages_with_pings() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    common::drive_pooled(&test);
    let registry = test.registry().clone();
    let router = Dashboard::builder(registry.clone())
        .utilization_interval(Duration::from_millis(30))
        .config_interval(Duration::from_millis(30))
        .heartbeat(Duration::from_millis(10))
        .router();
    common::with_server(router, |addr| async move {
        for (path, render) in [
            (
                "/hystrix/utilization.stream",
                utilization::utilization_json as fn(&hystrix::Registry) -> String,
            ),
            ("/hystrix/config.stream", configuration::config_json),
        ] {
            let mut response = connect(addr, path).await;
            // Two samples (one message each), pings between them.
            let mut pings = 0;
            let mut samples = Vec::new();
            while samples.len() < 2 || pings < 1 {
                let frame = common::within(response.next_frame()).await.unwrap();
                match data(&frame) {
                    Some(json) => samples.push(json),
                    None => pings += 1,
                }
            }
            // Nothing runs now, so every sample equals a message rendered here.
            assert_eq!(samples[0], render(&registry), "{path}");
            assert_eq!(samples[1], samples[0], "{path}");
        }
        let mut utilization = connect(addr, "/hystrix/utilization.stream").await;
        let message: Value = serde_json::from_str(&next_data(&mut utilization).await).unwrap();
        assert_eq!(
            message,
            json!({
                "type": "HystrixUtilization",
                "commands": {"Mixed": {"activeCount": 0}, "Pooled": {"activeCount": 0}},
                "threadpools": {
                    "ShopPool": {"activeCount": 0, "queueSize": 0, "corePoolSize": 10, "poolSize": 2}
                },
            })
        );
    });
}

#[test]
fn the_requests_stream_sends_one_array_per_finished_request_on_both_paths() {
    let test = TestRegistry::new();
    let command = common::semaphore_command(&test, "StreamedRequest", "Shop");
    let dashboard = Dashboard::builder(test.registry().clone())
        .heartbeat(Duration::from_millis(20))
        .build();
    common::with_server(dashboard.router(), |addr| async move {
        let mut plural = connect(addr, "/hystrix/requests.stream").await;
        let mut singular = connect(addr, "/hystrix/request.stream").await;
        assert_eq!(dashboard.stream_clients_of(StreamKind::Requests), 2);

        let clock = test.clock().clone();
        let ctx = RequestContext::new();
        {
            let _entered = ctx.enter();
            for ms in [5, 7] {
                let clock = clock.clone();
                command
                    .run(move || {
                        clock.advance_ms(ms);
                        Ok::<_, common::Boom>(1)
                    })
                    .execute()
                    .unwrap();
            }
            command
                .run(|| Ok::<_, common::Boom>(1))
                .cache_key("k")
                .execute()
                .unwrap();
            command
                .run(|| Ok::<_, common::Boom>(2))
                .cache_key("k")
                .execute()
                .unwrap();
        }
        // Nothing is sent while the request is open (and an empty request sends nothing).
        drop(RequestContext::new());
        drop(ctx);
        let expected = json!([
            {"name": "StreamedRequest", "events": ["SUCCESS"], "latencies": [5, 7, 0], "cached": 1}
        ])
        .to_string();
        for response in [&mut plural, &mut singular] {
            // Other tests of this binary end requests too: skip theirs.
            let mine = loop {
                let json = next_data(response).await;
                if json.contains("StreamedRequest") {
                    break json;
                }
            };
            assert_eq!(mine, expected);
        }
    });
}

#[test]
fn each_stream_has_its_own_limit_and_a_disconnect_frees_its_slot() {
    let test = TestRegistry::new();
    let dashboard = Dashboard::builder(test.registry().clone())
        .max_connections(1)
        .heartbeat(Duration::from_millis(10))
        .build();
    common::with_server(dashboard.router(), |addr| async move {
        let mut open = connect_to_every_stream(addr).await;
        for stream in StreamKind::ALL {
            assert_eq!(dashboard.stream_clients_of(stream), 1);
        }
        for stream in StreamKind::ALL {
            assert_eq!(
                refused(addr, stream.path()).await,
                "MaxConcurrentConnections reached: 1"
            );
        }
        assert_eq!(
            refused(addr, "/hystrix/request.stream").await,
            "MaxConcurrentConnections reached: 1",
            "both paths share the requests stream's slots"
        );
        // Closing the utilization client frees its slot (the server sees it at its next ping
        // at the latest); the other streams keep theirs.
        drop(open.remove(1));
        clients(&dashboard, StreamKind::Utilization, 0).await;
        for stream in [
            StreamKind::Dashboard,
            StreamKind::Config,
            StreamKind::Requests,
        ] {
            assert_eq!(dashboard.stream_clients_of(stream), 1);
        }
        let _again = connect(addr, "/hystrix/utilization.stream").await;
        assert_eq!(dashboard.stream_clients_of(StreamKind::Utilization), 1);
    });
}

/// Reads `n` data frames and returns the time from the first to the last.
async fn span_of(response: &mut common::Response, n: usize) -> Duration {
    next_data(response).await;
    let first = Instant::now();
    for _ in 1..n {
        next_data(response).await;
    }
    first.elapsed()
}

#[test]
fn the_stream_properties_set_the_intervals_and_the_limit_once_at_build_time() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    let props = test.registry().properties();
    props
        .set("hystrix.stream.utilization.intervalInMilliseconds", 700)
        .unwrap();
    props
        .set("hystrix.stream.config.intervalInMilliseconds", 20)
        .unwrap();
    props
        .set("hystrix.stream.dashboard.intervalInMilliseconds", 20)
        .unwrap();
    props
        .set("hystrix.config.stream.maxConcurrentConnections", 2)
        .unwrap();
    let builder = Dashboard::builder(test.registry().clone()).heartbeat(Duration::from_millis(10));
    // Read once: a change after `builder` does not reach this dashboard.
    props
        .set("hystrix.config.stream.maxConcurrentConnections", 1)
        .unwrap();
    let dashboard = builder.clone().build();
    // An explicit call wins over its property.
    let overridden = builder.interval(Duration::from_millis(700)).build();
    common::runtime().block_on(async move {
        let addr = common::spawn_server(dashboard.router()).await;
        let other = common::spawn_server(overridden.router()).await;

        // 20 ms: four config samples come long before the default 5000 ms would allow.
        let mut config = connect(addr, "/hystrix/config.stream").await;
        let config_span = span_of(&mut config, 4).await;
        assert!(config_span < Duration::from_secs(3), "{config_span:?}");
        // 700 ms: three samples span at least two intervals (the default 500 ms would not).
        let mut utilization = connect(addr, "/hystrix/utilization.stream").await;
        let utilization_span = span_of(&mut utilization, 3).await;
        assert!(
            utilization_span >= Duration::from_millis(1_200),
            "{utilization_span:?}"
        );
        // The dashboard stream: 20 ms from the property, 700 ms where the builder said so.
        let mut fast = connect(addr, "/hystrix.stream").await;
        let fast_span = span_of(&mut fast, 4).await;
        assert!(fast_span < Duration::from_secs(3), "{fast_span:?}");
        let mut slow = connect(other, "/hystrix.stream").await;
        let slow_span = span_of(&mut slow, 3).await;
        assert!(slow_span >= Duration::from_millis(1_200), "{slow_span:?}");

        // Two clients per stream (the property when the builder was made), the third refused.
        let _second = connect(addr, "/hystrix/config.stream").await;
        assert_eq!(
            refused(addr, "/hystrix/config.stream").await,
            "MaxConcurrentConnections reached: 2"
        );
    });
}

/// A connection with a tiny receive buffer that asks for `path` (and reads only the headers).
async fn small_buffer_client(addr: std::net::SocketAddr, path: &str) -> common::Response {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(addr).await.unwrap();
    let response = common::get_on(stream, path).await;
    assert_eq!(response.status, 200);
    response
}

fn epoch_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The `currentTime`s of the registry's "Command0" messages in the frames read for `window`
/// (only those are parsed, so that reading keeps up with the stream).
async fn tick_times(response: &mut common::Response, window: Duration) -> Vec<u64> {
    let end = Instant::now() + window;
    let mut times = Vec::new();
    while Instant::now() < end {
        let json = next_data(response).await;
        if json.starts_with(r#"{"type":"HystrixCommand","name":"Command0","#) {
            let message: Value = serde_json::from_str(&json).unwrap();
            times.push(message["currentTime"].as_u64().unwrap());
        }
    }
    times
}

#[test]
fn a_client_that_never_reads_holds_up_no_one_and_frees_its_slot_when_it_goes() {
    // 200 commands: about 400 KB per tick, every 50 ms: in 1.5 s far more than a socket's
    // buffers hold.
    let test = TestRegistry::new();
    for n in 0..200 {
        common::semaphore_command(&test, &format!("Command{n}"), "Big")
            .run(|| Ok::<_, common::Boom>(1))
            .execute()
            .unwrap();
    }
    let dashboard = Dashboard::builder(test.registry().clone())
        .interval(Duration::from_millis(50))
        .heartbeat(Duration::from_millis(10))
        .build();
    common::with_server(dashboard.router(), |addr| async move {
        let mut stalled = small_buffer_client(addr, "/hystrix.stream").await;
        clients(&dashboard, StreamKind::Dashboard, 1).await;
        let mut reader = connect(addr, "/hystrix.stream").await;
        assert_eq!(dashboard.stream_clients(), 2);

        // For 1.5 s the reading client gets tick after tick while the other reads nothing.
        let times = tick_times(&mut reader, Duration::from_millis(1_500)).await;
        assert!(times.len() >= 5, "only {} ticks", times.len());
        let widest = times.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        assert!(widest < 750, "a gap of {widest} ms between ticks");
        assert_eq!(dashboard.stream_clients(), 2);
        // When the stalled client reads again, it gets what the buffers on its way held, then
        // the current ticks: it skipped ticks rather than made the sampler wait for it.
        let now = epoch_ms();
        let mut stalled_times = Vec::new();
        common::within(async {
            while stalled_times.last().is_none_or(|&time| time < now) {
                stalled_times.extend(tick_times(&mut stalled, Duration::from_millis(10)).await);
            }
        })
        .await;
        let skipped = stalled_times.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        assert!(
            skipped >= 500,
            "the stalled client's widest gap is {skipped} ms"
        );

        // The stalled client goes: its slot is free at the next write at the latest.
        drop(stalled);
        clients(&dashboard, StreamKind::Dashboard, 1).await;
        // And the reader still gets ticks.
        assert!(
            !tick_times(&mut reader, Duration::from_millis(100))
                .await
                .is_empty()
        );
    });
}

/// Waits (at most 5 s) until the runtime has `n` tasks alive.
async fn tasks(n: usize) {
    common::eventually(|| {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
            == n
    })
    .await;
}

#[test]
fn one_sampler_per_stream_starts_with_its_first_client_and_stops_with_its_last() {
    let test = TestRegistry::new();
    let dashboard = Dashboard::builder(test.registry().clone())
        .heartbeat(Duration::from_millis(10))
        .build();
    common::with_server(dashboard.router(), |addr| async move {
        // The server's task; then a task per connection, and one per stream with clients.
        let idle = tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks();
        let first = connect(addr, "/hystrix/requests.stream").await;
        tasks(idle + 2).await;
        let second = connect(addr, "/hystrix/request.stream").await;
        tasks(idle + 3).await;
        let other = connect(addr, "/hystrix/utilization.stream").await;
        tasks(idle + 5).await;
        drop(first);
        tasks(idle + 4).await;
        // The last client of the requests stream leaves: its sampler (and its request log
        // listener) goes with it.
        drop(second);
        tasks(idle + 2).await;
        drop(other);
        tasks(idle).await;
        // A new client starts a new sampler.
        let mut again = connect(addr, "/hystrix/utilization.stream").await;
        tasks(idle + 2).await;
        assert!(next_data(&mut again).await.contains("HystrixUtilization"));
    });
}

#[test]
fn shutdown_ends_every_stream_and_refuses_new_ones() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    let dashboard = Dashboard::builder(test.registry().clone())
        .heartbeat(Duration::from_millis(20))
        .build();
    common::with_server(dashboard.router(), |addr| async move {
        let mut open = connect_to_every_stream(addr).await;
        assert!(!dashboard.is_shut_down());
        dashboard.shutdown();
        assert!(dashboard.is_shut_down());
        // Every open stream ends (after what was already on its way).
        for response in &mut open {
            common::within(async { while response.next_frame().await.is_some() {} }).await;
        }
        for stream in StreamKind::ALL {
            clients(&dashboard, stream, 0).await;
            assert_eq!(
                refused(addr, stream.path()).await,
                "Service has been shut down."
            );
        }
        assert_eq!(
            refused(addr, "/hystrix/request.stream").await,
            "Service has been shut down."
        );
        // The metrics endpoint is not a stream: it still answers.
        let metrics = common::within(common::get(addr, "/metrics")).await;
        assert_eq!(metrics.status, 200);
        dashboard.shutdown(); // again: nothing changes
        assert!(dashboard.is_shut_down());
    });
}
