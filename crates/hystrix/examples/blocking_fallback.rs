//! A blocking command with a fallback, protecting calls to a flaky user service.
//!
//! Run with `cargo run --example blocking_fallback`.
//!
//! The "user service" is a real TCP server on 127.0.0.1 that answers `GET <id>` with a name,
//! except that ids divisible by 5 answer slowly (300 ms) and ids divisible by 7 hang up. The
//! `GetUser` command runs each call on its own pool of 4 threads (THREAD isolation, the default
//! for blocking runs), bounds it with a 100 ms timeout, and answers "anonymous" when the call
//! fails or is too slow. The caller is answered at the deadline even while a slow call still
//! holds its pool thread.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use hystrix::{CancellationToken, Command, EventType, Registry};

fn start_user_service() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            thread::spawn(move || serve(stream));
        }
    });
    Ok(addr)
}

fn serve(mut stream: TcpStream) {
    let mut line = String::new();
    if BufReader::new(&stream).read_line(&mut line).is_err() {
        return;
    }
    let id: u32 = line.trim().trim_start_matches("GET ").parse().unwrap_or(0);
    if id % 7 == 0 {
        return; // hang up without an answer
    }
    if id % 5 == 0 {
        thread::sleep(Duration::from_millis(300));
    }
    let _ = writeln!(stream, "user-{id}");
}

/// The dependency call: one request over a fresh connection. It stops waiting when the token
/// is cancelled (at the command's timeout) or after 500 ms, whichever comes first.
fn get_user(addr: SocketAddr, id: u32, token: &CancellationToken) -> std::io::Result<String> {
    let mut stream = TcpStream::connect(addr)?;
    writeln!(stream, "GET {id}")?;
    stream.set_read_timeout(Some(Duration::from_millis(20)))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    for _ in 0..25 {
        match reader.read_line(&mut line) {
            Ok(0) => return Err(std::io::Error::other("connection closed without an answer")),
            Ok(_) => return Ok(line.trim().to_owned()),
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                if token.is_cancelled() {
                    return Err(std::io::Error::other("cancelled at the timeout"));
                }
            }
            Err(e) => return Err(e),
        }
    }
    Err(std::io::Error::other("no answer in 500 ms"))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr = start_user_service()?;
    let registry = Registry::new();
    let get_user_cmd = Command::builder("GetUser")
        .group("UserService")
        .timeout(Duration::from_millis(100))
        .thread_pool_core_size(4)
        .build_in(&registry)?;

    for id in 1..=15 {
        let outcome = get_user_cmd
            .run_cancellable(move |token| get_user(addr, id, &token))
            .fallback(|err| {
                println!("    fallback after: {err}");
                Ok::<_, std::io::Error>("anonymous".to_owned())
            })
            .execute_outcome();
        let result = *outcome.execution_result();
        match outcome.into_response() {
            Ok(name) => println!(
                "id {id:>2}: {name:<10} {:?} in {} ms",
                result.execution_events(),
                result.total_time_ms()
            ),
            Err(err) => println!("id {id:>2}: error {err}"),
        }
    }

    let metrics = get_user_cmd.metrics();
    println!(
        "\nGetUser: {} succeeded, {} failed, {} timed out, {} answered by the fallback",
        metrics.cumulative_count(EventType::Success),
        metrics.cumulative_count(EventType::Failure),
        metrics.cumulative_count(EventType::Timeout),
        metrics.cumulative_count(EventType::FallbackSuccess),
    );
    if let Some(pool) = get_user_cmd.thread_pool_metrics() {
        println!(
            "UserService pool: {} threads, {} tasks completed",
            pool.current_pool_size, pool.current_completed_task_count
        );
    }
    Ok(())
}
