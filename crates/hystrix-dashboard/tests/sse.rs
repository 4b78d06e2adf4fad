//! The /hystrix.stream endpoint over a real socket: headers, SSE framing, pings, the shared
//! sampler's messages, the connection limit and a freed slot.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use hystrix::testing::TestRegistry;
use hystrix_dashboard::Dashboard;
use serde_json::Value;

#[test]
fn stream_sends_pings_and_one_data_frame_per_message_with_hystrix_headers() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    common::drive_pooled(&test);
    let router = Dashboard::builder(test.registry().clone())
        .interval(Duration::from_millis(50))
        .heartbeat(Duration::from_millis(20))
        .router();
    common::runtime().block_on(async move {
        let addr = common::spawn_server(router).await;
        let mut response = common::within(common::get(addr, "/hystrix.stream?delay=2000")).await;
        common::assert_sse_headers(&response);

        // The first frame is a ping; then data frames of one object each, and more pings.
        let first = common::within(response.next_frame()).await.unwrap();
        assert_eq!(first, "ping: \n\n");
        let mut types = Vec::new();
        let mut pings = 0;
        while types.len() < 6 || pings < 2 {
            let frame = common::within(response.next_frame()).await.unwrap();
            if frame == "ping: \n\n" {
                pings += 1;
                continue;
            }
            let json = frame
                .strip_prefix("data: ")
                .and_then(|rest| rest.strip_suffix("\n\n"))
                .unwrap_or_else(|| panic!("not an SSE data frame: {frame:?}"));
            assert!(!json.contains('\n'));
            let value: Value = serde_json::from_str(json).unwrap();
            assert!(value.is_object(), "one object per frame, never an array");
            types.push((
                value["type"].as_str().unwrap().to_owned(),
                value["name"].as_str().unwrap().to_owned(),
            ));
        }
        // Each tick: the commands (sorted), then the pool.
        let tick: Vec<(&str, &str)> = types[..3]
            .iter()
            .map(|(t, n)| (t.as_str(), n.as_str()))
            .collect();
        assert_eq!(
            tick,
            [
                ("HystrixCommand", "Mixed"),
                ("HystrixCommand", "Pooled"),
                ("HystrixThreadPool", "ShopPool")
            ]
        );
        assert_eq!(types[3..6], types[..3]);
    });
}

#[test]
fn the_sixth_client_gets_503_and_a_closed_client_frees_its_slot() {
    let test = TestRegistry::new();
    common::drive_mixed(&test);
    let dashboard = Dashboard::builder(test.registry().clone())
        .heartbeat(Duration::from_millis(20))
        .build();
    let router = dashboard.router();
    common::runtime().block_on(async move {
        let addr = common::spawn_server(router).await;
        let mut clients = Vec::new();
        for _ in 0..5 {
            let mut client = common::within(common::get(addr, "/hystrix.stream")).await;
            assert_eq!(client.status, 200);
            assert_eq!(
                common::within(client.next_frame()).await.unwrap(),
                "ping: \n\n"
            );
            clients.push(client);
        }
        assert_eq!(dashboard.stream_clients(), 5);
        let refused = common::within(common::get(addr, "/hystrix.stream")).await;
        assert_eq!(refused.status, 503);
        assert_eq!(
            common::within(refused.body()).await,
            "MaxConcurrentConnections reached: 5"
        );

        // Close one: its slot is freed once the server sees it (the next ping write at most).
        drop(clients.pop());
        common::within(async {
            while dashboard.stream_clients() > 4 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await;
        let mut again = common::within(common::get(addr, "/hystrix.stream")).await;
        assert_eq!(again.status, 200);
        assert_eq!(
            common::within(again.next_frame()).await.unwrap(),
            "ping: \n\n"
        );
        assert_eq!(dashboard.stream_clients(), 5);
        drop(again);
        drop(clients);
        common::eventually(|| dashboard.stream_clients() == 0).await;
    });
}

#[test]
fn max_connections_is_configurable() {
    let test = TestRegistry::new();
    let router = Dashboard::builder(test.registry().clone())
        .max_connections(1)
        .router();
    common::runtime().block_on(async move {
        let addr = common::spawn_server(router).await;
        let first = common::within(common::get(addr, "/hystrix.stream")).await;
        assert_eq!(first.status, 200);
        let second = common::within(common::get(addr, "/hystrix.stream")).await;
        assert_eq!(second.status, 503);
        assert_eq!(
            common::within(second.body()).await,
            "MaxConcurrentConnections reached: 1"
        );
    });
}
