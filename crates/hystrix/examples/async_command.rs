//! An async command under load: timeouts that really cancel, a semaphore bulkhead, fallbacks.
//!
//! Run with `cargo run --example async_command`.
//!
//! A price service on 127.0.0.1 answers `PRICE <item>` after 0, 40, 80 or 120 ms (by `item % 4`).
//! Twenty
//! lookups go out at once through the `GetPrice` command: at most 8 run concurrently (the rest
//! are rejected by the semaphore at once), and a lookup slower than 100 ms is dropped at its
//! deadline, so its connection closes and its permit frees immediately. Every failure is
//! answered with a stale price from memory.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hystrix::{Command, EventType, Registry};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

async fn start_price_service() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(serve(stream));
        }
    });
    Ok(addr)
}

async fn serve(stream: TcpStream) {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    if BufReader::new(read).read_line(&mut line).await.is_err() {
        return;
    }
    let item: u64 = line
        .trim()
        .trim_start_matches("PRICE ")
        .parse()
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis((item % 4) * 40)).await;
    let _ = write
        .write_all(format!("{}\n", item * 100).as_bytes())
        .await;
}

async fn fetch_price(addr: SocketAddr, item: u64) -> std::io::Result<u64> {
    let stream = TcpStream::connect(addr).await?;
    let (read, mut write) = stream.into_split();
    write
        .write_all(format!("PRICE {item}\n").as_bytes())
        .await?;
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    line.trim().parse().map_err(std::io::Error::other)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = start_price_service().await?;
    let registry = Registry::new();
    let get_price = Command::builder("GetPrice")
        .group("Pricing")
        .timeout(Duration::from_millis(100))
        .semaphore_max_concurrent_requests(8)
        .build_in(&registry)?;
    let stale_prices: Arc<HashMap<u64, u64>> = Arc::new((1..=20).map(|i| (i, i * 90)).collect());

    let lookups = (1..=20u64).map(|item| {
        let (get_price, stale_prices) = (get_price.clone(), Arc::clone(&stale_prices));
        tokio::spawn(async move {
            let outcome = get_price
                .run_async(fetch_price(addr, item))
                .fallback(move |_err| {
                    stale_prices
                        .get(&item)
                        .copied()
                        .ok_or_else(|| std::io::Error::other("no stale price"))
                })
                .execute_async_outcome()
                .await;
            (item, outcome)
        })
    });
    for lookup in lookups.collect::<Vec<_>>() {
        let (item, outcome) = lookup.await?;
        let events = outcome.execution_result().execution_events();
        match outcome.into_response() {
            Ok(price) => println!("item {item:>2}: {price:>5} {events:?}"),
            Err(err) => println!("item {item:>2}: error {err}"),
        }
    }

    let metrics = get_price.metrics();
    println!(
        "\nGetPrice: {} fresh, {} timed out, {} rejected by the bulkhead, {} stale from the fallback",
        metrics.cumulative_count(EventType::Success),
        metrics.cumulative_count(EventType::Timeout),
        metrics.cumulative_count(EventType::SemaphoreRejected),
        metrics.cumulative_count(EventType::FallbackSuccess),
    );
    Ok(())
}
