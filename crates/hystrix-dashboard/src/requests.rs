//! The message of Hystrix's requests stream (`/hystrix/requests.stream`): one JSON
//! array per finished request context, listing what its executions did, as Hystrix 1.5's
//! `HystrixRequestEventsJsonStream` writes it, one line on the wire:
//!
//! ```json
//! [{"name":"GetUser","events":["SUCCESS"],"latencies":[12,9],"cached":3},
//!  {"name":"GetRatings","events":["SUCCESS"],"latencies":[4],
//!   "collapsed":{"name":"GetRating","count":3}},
//!  {"name":"Search","events":[{"name":"EMIT","count":7},"SUCCESS"],"latencies":[31]}]
//! ```

use hystrix::context::{RequestLog, RequestLogEntry};
use hystrix::{EventCounts, EventType};
use serde::ser::{Serialize, SerializeSeq, Serializer};

use crate::stream::to_json;

/// One execution signature: executions of one command with the same events (and counts) from
/// the same collapser, merged.
#[derive(serde::Serialize)]
struct Signature<'a> {
    name: &'a str,
    events: Events,
    latencies: Vec<u64>,
    #[serde(skip_serializing_if = "is_zero")]
    cached: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    collapsed: Option<Collapsed<'a>>,
}

#[derive(serde::Serialize)]
struct Collapsed<'a> {
    name: Option<&'a str>,
    count: u32,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// An execution's events in Hystrix's order: a name, or `{"name","count"}` for an event counted
/// more than once; COLLAPSED is left out (it is the `collapsed` object).
struct Events(EventCounts);

impl Serialize for Events {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct Counted {
            name: &'static str,
            count: u32,
        }
        let events = self.0;
        let mut seq = serializer.serialize_seq(None)?;
        for event in events.iter().filter(|&event| event != EventType::Collapsed) {
            match events.count(event) {
                count if count > 1 => seq.serialize_element(&Counted {
                    name: event.name(),
                    count,
                })?,
                _ => seq.serialize_element(event.name())?,
            }
        }
        seq.end()
    }
}

/// Whether `hit` (a cache hit) shares the outcome of an execution with `events`: its events are
/// those plus RESPONSE_FROM_CACHE, with the same counts.
fn hit_of(hit: &EventCounts, events: &EventCounts) -> bool {
    let without_cache = |counts: &EventCounts| {
        counts
            .iter()
            .filter(|&event| event != EventType::ResponseFromCache)
            .map(|event| (event, counts.count(event)))
            .collect::<Vec<_>>()
    };
    !events.contains(EventType::ResponseFromCache) && without_cache(hit) == without_cache(events)
}

/// The signatures of `log` in the order each first finished.
fn signatures(log: &RequestLog) -> Vec<Signature<'_>> {
    // (command, events, collapser) of each signature, beside it.
    let mut merged: Vec<(&RequestLogEntry, Signature<'_>)> = Vec::new();
    let same = |first: &RequestLogEntry, entry: &RequestLogEntry| {
        first.command_key == entry.command_key
            && first.events == entry.events
            && first.collapser_key == entry.collapser_key
    };
    let (hits, executions): (Vec<&RequestLogEntry>, Vec<&RequestLogEntry>) =
        log.entries().iter().partition(|entry| entry.is_cache_hit());
    for entry in executions {
        match merged.iter_mut().find(|(first, _)| same(first, entry)) {
            Some((_, signature)) => signature.latencies.push(entry.execution_time_ms),
            None => merged.push((entry, signature(entry))),
        }
    }
    for hit in hits {
        let origin = |first: &RequestLogEntry| {
            first.command_key == hit.command_key && hit_of(&hit.events, &first.events)
        };
        if let Some((_, signature)) = merged.iter_mut().find(|(first, _)| origin(first)) {
            signature.cached += 1;
            continue;
        }
        // Its execution is not in the log (past the log's capacity): listed on its own.
        match merged.iter_mut().find(|(first, _)| same(first, hit)) {
            Some((_, signature)) => signature.latencies.push(hit.execution_time_ms),
            None => merged.push((hit, signature(hit))),
        }
    }
    merged.into_iter().map(|(_, signature)| signature).collect()
}

fn signature(entry: &RequestLogEntry) -> Signature<'_> {
    Signature {
        name: entry.command_key.as_str(),
        events: Events(entry.events),
        latencies: vec![entry.execution_time_ms],
        cached: 0,
        collapsed: entry
            .events
            .contains(EventType::Collapsed)
            .then(|| Collapsed {
                name: entry.collapser_key.as_ref().map(|key| key.as_str()),
                count: entry.events.count(EventType::Collapsed),
            }),
    }
}

/// The message of one finished request (compact, single-line JSON array), from its log (e.g.
/// one given to a [`subscribe_request_logs`](hystrix::context::subscribe_request_logs)
/// listener).
///
/// Executions of the same command key with the same events and counts (and, for a collapser's
/// batch, the same collapser and batch size) are merged into one object, in the order each
/// first finished, with each one's execution time in `latencies` (whole ms, from its start to
/// the run's end, for a retried execution its last attempt's; 0 when the run never started,
/// e.g. short-circuited). A cache hit is not listed: it adds 1 to `cached` of the execution
/// whose outcome it shared (the object with the same command and the same events without
/// RESPONSE_FROM_CACHE); `cached` is written only when above 0. `events` lists the events in Hystrix's order, each as its name, or as
/// `{"name":"EMIT","count":n}` when it happened n > 1 times (EMIT, FALLBACK_EMIT, as Hystrix;
/// in an execution of several attempts also FAILURE, TIMEOUT, the rejections, RETRY, HEDGE and
/// HEDGE_CANCELLED, e.g. `["SUCCESS",{"name":"FAILURE","count":2},{"name":"RETRY","count":2}]`).
/// A collapser's batch has `"collapsed":{"name":<collapser key>,"count":<batch size>}`, and
/// COLLAPSED is not repeated in `events`.
///
/// Unlike Hystrix, the cache key does not split executions (it is not in the message, so
/// executions that differ only by it would look like duplicates), and a hit whose execution is
/// missing from the log (past the log's 1000 entries) is listed with its own events rather
/// than dropped.
pub fn requests_json(log: &RequestLog) -> String {
    to_json(&signatures(log))
}
