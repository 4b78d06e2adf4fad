//! A request collapser: per-item rating lookups batched into one backend call per window.
//!
//! Run with `cargo run --example collapser`.
//!
//! A "ratings service" on 127.0.0.1 answers `RATINGS 1,2,3` with `1=4.1,2=4.2,3=4.3` and counts
//! its calls. Forty lookups of one rating each arrive at about the same time, from 40 tasks;
//! the `GetRating` collapser (GLOBAL scope, 10 ms windows, at most 16 per batch) sends them to
//! the backend in a few `GetRatings` batch calls. Movie 13 has no rating: its request gets a
//! clear "no response" error while the others get theirs. At the end the example prints how
//! many backend calls the lookups took and the batch command's COLLAPSED count.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use hystrix::collapser::{Collapser, CollapserEvent, CollapserScope};
use hystrix::{Command, EventType, FailureType, IsolationStrategy, Registry};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// The ratings service: one line of ids in, one line of `id=rating` pairs out.
async fn start_ratings_service(calls: Arc<AtomicU32>) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            calls.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(async move {
                let (read, mut write) = stream.into_split();
                let mut line = String::new();
                if BufReader::new(read).read_line(&mut line).await.is_err() {
                    return;
                }
                let answer: Vec<String> = line
                    .trim()
                    .trim_start_matches("RATINGS ")
                    .split(',')
                    .filter_map(|id| id.parse::<u32>().ok())
                    .filter(|&id| id != 13) // unrated
                    .map(|id| format!("{id}={:.1}", 4.0 + f64::from(id % 10) / 10.0))
                    .collect();
                let _ = write
                    .write_all(format!("{}\n", answer.join(",")).as_bytes())
                    .await;
            });
        }
    });
    Ok(addr)
}

/// One backend call for many ids.
async fn fetch_ratings(addr: SocketAddr, ids: Vec<u32>) -> std::io::Result<HashMap<u32, f64>> {
    let stream = TcpStream::connect(addr).await?;
    let (read, mut write) = stream.into_split();
    let ids: Vec<String> = ids.iter().map(u32::to_string).collect();
    write
        .write_all(format!("RATINGS {}\n", ids.join(",")).as_bytes())
        .await?;
    let mut line = String::new();
    BufReader::new(read).read_line(&mut line).await?;
    Ok(line
        .trim()
        .split(',')
        .filter_map(|pair| {
            let (id, rating) = pair.split_once('=')?;
            Some((id.parse().ok()?, rating.parse().ok()?))
        })
        .collect())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let backend_calls = Arc::new(AtomicU32::new(0));
    let addr = start_ratings_service(Arc::clone(&backend_calls)).await?;

    let registry = Registry::builder()
        .executor(tokio::runtime::Handle::current())
        .build();
    let get_ratings = Command::builder("GetRatings")
        .group("Ratings")
        .isolation(IsolationStrategy::Semaphore)
        .build_in(&registry)?;
    let get_rating = Collapser::builder("GetRating")
        .scope(CollapserScope::Global)
        .max_requests_in_batch(16)
        .build(
            get_ratings.clone(),
            move |ids: Vec<u32>| fetch_ratings(addr, ids),
            |ratings: &mut HashMap<u32, f64>, id: &u32| ratings.remove(id),
        )?;

    let lookups: Vec<_> = (1..=40)
        .map(|movie| {
            let get_rating = get_rating.clone();
            tokio::spawn(async move { (movie, get_rating.queue(movie).await) })
        })
        .collect();
    let mut rated = 0;
    for lookup in lookups {
        let (movie, rating) = lookup.await?;
        match rating {
            Ok(rating) => {
                assert!((4.0..5.0).contains(&*rating));
                rated += 1;
            }
            Err(err) => {
                assert_eq!(movie, 13, "only movie 13 is unrated");
                assert_eq!(err.failure_type(), FailureType::CollapserMissingResponse);
                println!("movie {movie}: {err}");
            }
        }
    }

    let calls = backend_calls.load(Ordering::Relaxed);
    let metrics = get_ratings.metrics();
    let collapsed = metrics.cumulative_count(EventType::Collapsed);
    let batches = get_rating
        .metrics()
        .cumulative_count(CollapserEvent::BatchExecuted);
    println!(
        "40 lookups ({rated} rated) took {calls} backend calls in {batches} batches; \
         GetRatings COLLAPSED {collapsed}"
    );
    assert_eq!(rated, 39);
    assert_eq!(collapsed, 40);
    assert!(
        calls >= 3 && u64::from(calls) == batches,
        "at most 16 per batch"
    );
    assert!(calls < 40, "lookups were batched");
    registry.shutdown();
    Ok(())
}
