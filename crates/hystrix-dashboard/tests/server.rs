//! `Dashboard::serve`'s limits, over real sockets: stream clients that stop reading lose their
//! slots after the write timeout, connections past the cap are closed, and the request-read and
//! idle timeouts close slow and idle connections.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::Duration;

use common::{
    GET_METRICS, connect_small, eventually, exchange, get_metrics, registry_with_big_samples,
    runtime, serve, until_closed, within,
};
use hystrix::testing::TestRegistry;
use hystrix_dashboard::Dashboard;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

#[test]
fn the_write_timeout_defaults_to_its_property_default() {
    let default = hystrix::config::StreamProperties::default().write_timeout_in_milliseconds;
    assert_eq!(default, 1500);
    assert_eq!(
        Duration::from_millis(default),
        hystrix_dashboard::DEFAULT_WRITE_TIMEOUT
    );
}

#[test]
fn stream_clients_that_stop_reading_lose_their_slots_after_the_write_timeout() {
    let test = registry_with_big_samples();
    test.registry()
        .properties()
        .set("hystrix.stream.writeTimeoutInMilliseconds", 1000)
        .unwrap();
    let dashboard = Dashboard::builder(test.registry().clone())
        .interval(Duration::from_millis(5))
        .max_connections(3)
        .build();
    runtime().block_on(async {
        let addr = serve(dashboard.clone()).await;
        // Three clients take the three slots, then read nothing.
        let start = Instant::now();
        let mut stalled = Vec::new();
        for _ in 0..3 {
            stalled.push(connect_small(addr, "/hystrix.stream").await);
        }
        eventually(|| dashboard.stream_clients() == 3).await;
        let (_, answer) = get_metrics(addr).await;
        assert_eq!(answer.unwrap().0, 200, "/metrics is not a stream");
        let reader = within(common::get(addr, "/hystrix.stream")).await;
        assert_eq!(reader.status, 503);
        assert_eq!(
            within(reader.body()).await,
            "MaxConcurrentConnections reached: 3"
        );

        // Their writes block; a second later the server drops them and their slots.
        eventually(|| dashboard.stream_clients() == 0).await;
        assert!(start.elapsed() >= Duration::from_millis(1000));
        for stream in &mut stalled {
            until_closed(stream).await;
        }
        let _reader = common::first_ping(addr, "/hystrix.stream").await;
        assert_eq!(dashboard.stream_clients(), 1);
    });
}

#[test]
fn a_stream_client_that_keeps_up_keeps_its_stream_past_the_write_timeout() {
    let test = registry_with_big_samples();
    let dashboard = Dashboard::builder(test.registry().clone())
        .interval(Duration::from_millis(20))
        .write_timeout(Duration::from_millis(300))
        .build();
    runtime().block_on(async {
        let addr = serve(dashboard.clone()).await;
        let mut response = within(common::get(addr, "/hystrix.stream")).await;
        common::assert_sse_headers(&response);
        let start = Instant::now();
        let mut messages = 0;
        while start.elapsed() < Duration::from_millis(1_500) {
            let frame = within(response.next_frame())
                .await
                .expect("the stream ended");
            messages += usize::from(frame.starts_with("data: "));
        }
        // Five times the write timeout, and still served: it bounds a stall, not a stream.
        assert!(messages >= 100, "{messages} messages");
        assert_eq!(dashboard.stream_clients(), 1);
    });
}

#[test]
fn connections_past_the_cap_are_closed_until_one_ends() {
    let test = TestRegistry::new();
    let dashboard = Dashboard::builder(test.registry().clone())
        .connection_limit(2)
        .build();
    runtime().block_on(async {
        let addr = serve(dashboard).await;
        // Two kept-alive connections, each answered once: the server holds both.
        let first = kept_alive(addr).await;
        let mut second = kept_alive(addr).await;

        // A third is closed unanswered, again and again.
        for _ in 0..3 {
            let (_, answer) = get_metrics(addr).await;
            assert_eq!(answer, None);
        }
        // The two still work.
        let answer = within(exchange(&mut second, GET_METRICS)).await;
        assert_eq!(answer.unwrap().0, 200);

        // One ends: a new connection is served (once the server has seen it go).
        drop(first);
        common::served_again(addr).await;
    });
}

/// A dashboard with the admin routes, served with these timeouts.
async fn serve_with_timeouts(request_read: Duration, idle: Duration) -> SocketAddr {
    let test = TestRegistry::new();
    let dashboard = Dashboard::builder(test.registry().clone())
        .admin()
        .request_read_timeout(request_read)
        .idle_timeout(idle)
        .build();
    serve(dashboard).await
}

/// [`serve_with_timeouts`] with an idle timeout of 60 s: out of the way.
async fn serve_with_request_read_timeout(request_read: Duration) -> SocketAddr {
    serve_with_timeouts(request_read, Duration::from_secs(60)).await
}

/// A connection whose first request has been answered, kept alive.
async fn kept_alive(addr: SocketAddr) -> TcpStream {
    let (stream, answer) = get_metrics(addr).await;
    assert_eq!(answer.unwrap().0, 200);
    stream
}

/// Waits until the server closes `stream` (at most 5 s), and checks it was not sooner than
/// `at_least` after `start`.
async fn closed_after(stream: &mut TcpStream, start: Instant, at_least: Duration) {
    until_closed(stream).await;
    let elapsed = start.elapsed();
    assert!(elapsed >= at_least, "closed after {elapsed:?}");
}

/// Sends `partial` (a request's start, or nothing) on a new connection to a server whose
/// request-read timeout is 300 ms, and checks the server closes it then, not sooner.
fn closed_after_the_request_read_timeout(partial: &str) {
    runtime().block_on(async {
        let timeout = Duration::from_millis(300);
        let addr = serve_with_request_read_timeout(timeout).await;
        let start = Instant::now();
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(partial.as_bytes()).await.unwrap();
        closed_after(&mut stream, start, timeout).await;
    });
}

#[test]
fn half_a_request_head_is_closed_after_the_request_read_timeout() {
    closed_after_the_request_read_timeout("GET /metrics HTTP/1.1\r\nHost: local");
}

#[test]
fn a_connection_that_sends_nothing_is_closed_after_the_request_read_timeout() {
    closed_after_the_request_read_timeout("");
}

#[test]
fn a_request_body_that_stops_coming_is_closed_after_the_request_read_timeout() {
    let name = "hystrix.command.default.execution.isolation.thread.timeoutInMilliseconds";
    closed_after_the_request_read_timeout(&format!(
        "PUT /hystrix/admin/config/properties/{name} HTTP/1.1\r\nHost: localhost\r\n\
         Content-Length: 10\r\n\r\n250"
    ));
}

#[test]
fn a_head_sent_a_byte_at_a_time_is_closed_after_the_request_read_timeout() {
    runtime().block_on(async {
        let addr = serve_with_request_read_timeout(Duration::from_millis(500)).await;
        let start = Instant::now();
        let stream = TcpStream::connect(addr).await.unwrap();
        let (mut read, mut write) = stream.into_split();
        // A byte every 50 ms: never idle, never done.
        let trickle = tokio::spawn(async move {
            for byte in b"GET /metrics HTTP/1.1\r\nX-Slow: ".iter().cycle() {
                if write.write_all(&[*byte]).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        // Closed without an answer.
        let mut buf = [0u8; 1024];
        match within(read.read(&mut buf)).await {
            Ok(0) => {}
            Ok(n) => panic!("an answer: {:?}", String::from_utf8_lossy(&buf[..n])),
            Err(err) => assert_eq!(err.kind(), ErrorKind::ConnectionReset),
        }
        assert!(start.elapsed() >= Duration::from_millis(500));
        within(trickle).await.unwrap();
    });
}

#[test]
fn an_idle_kept_alive_connection_is_closed_after_the_idle_timeout() {
    runtime().block_on(async {
        let addr = serve_with_timeouts(Duration::from_secs(60), Duration::from_millis(300)).await;
        let mut stream = kept_alive(addr).await;
        closed_after(&mut stream, Instant::now(), Duration::from_millis(250)).await;
    });
}

#[test]
fn a_kept_alive_connection_waits_for_its_next_request_past_the_request_read_timeout() {
    runtime().block_on(async {
        let addr = serve_with_request_read_timeout(Duration::from_millis(200)).await;
        let mut stream = kept_alive(addr).await;
        // Three request-read timeouts without a request: idle, not slow.
        tokio::time::sleep(Duration::from_millis(600)).await;
        let answer = within(exchange(&mut stream, GET_METRICS)).await;
        assert_eq!(answer.unwrap().0, 200);
    });
}
