//! A request context, its request cache and its request log: what each request of an edge
//! service executed.
//!
//! Run with `cargo run --example request_log`.
//!
//! A "catalog service" on 127.0.0.1 answers `GET <id>` with a title; the "ratings service" is
//! down (its port refuses connections). Each incoming request opens a `RequestContext`, looks up
//! two titles through `GetTitle` (on its own thread pool: the context follows the call there)
//! and their ratings through `GetRating`, whose fallback answers "unrated". Titles go through the
//! request cache (cache key = the id), so a request that shows one title twice fetches it once.
//! At the end of each request its log is printed in Hystrix's format, e.g.
//! `GetTitle[SUCCESS][1ms]x2, GetRating[FAILURE, FALLBACK_SUCCESS][0ms]x2`, or for the request
//! with a repeated id `GetTitle[SUCCESS][1ms], GetRating[FAILURE, FALLBACK_SUCCESS][0ms]x2,
//! GetTitle[SUCCESS, RESPONSE_FROM_CACHE][0ms]`.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::Duration;

use hystrix::context::RequestContext;
use hystrix::{Command, EventType, Registry};

fn start_catalog() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            thread::spawn(move || {
                let mut line = String::new();
                if BufReader::new(&stream).read_line(&mut line).is_ok() {
                    let id = line.trim().trim_start_matches("GET ");
                    let _ = writeln!(stream, "Title #{id}");
                }
            });
        }
    });
    Ok(addr)
}

/// A port nothing listens on: connections to it are refused.
fn closed_port() -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.local_addr()
    // dropped here: the port is closed
}

fn get(addr: SocketAddr, id: u32) -> std::io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200))?;
    stream.set_read_timeout(Some(Duration::from_millis(500)))?;
    writeln!(stream, "GET {id}")?;
    let mut answer = String::new();
    BufReader::new(stream).read_line(&mut answer)?;
    Ok(answer.trim().to_owned())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let catalog = start_catalog()?;
    let ratings = closed_port()?;
    let registry = Registry::new();
    let get_title = Command::builder("GetTitle")
        .group("Catalog")
        .timeout(Duration::from_millis(500))
        .build_in(&registry)?;
    let get_rating = Command::builder("GetRating")
        .group("Ratings")
        .timeout(Duration::from_millis(500))
        .build_in(&registry)?;

    for (request, ids) in [(1, [3, 4]), (2, [5, 5])] {
        let ctx = RequestContext::new();
        let _in_request = ctx.enter();
        for id in ids {
            let title = get_title
                .run(move || get(catalog, id))
                .cache_key(id.to_string())
                .execute()?;
            let rating = get_rating
                .run(move || get(ratings, id))
                .fallback(|_| Ok::<_, std::io::Error>("unrated".to_owned()))
                .execute()?;
            println!("request {request}: {title}: {rating}");
        }
        let log = ctx.request_log();
        assert_eq!(log.entries().len(), 4);
        let hits = log
            .entries()
            .iter()
            .filter(|entry| entry.events.contains(EventType::ResponseFromCache))
            .count();
        assert_eq!(
            hits,
            usize::from(ids[0] == ids[1]),
            "a repeated id is a cache hit"
        );
        println!("request {request} executed: {log}");
    }
    registry.shutdown();
    Ok(())
}
