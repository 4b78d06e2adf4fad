//! HTTP clients: the async one (hyper-util's pooled client) and the blocking one (ureq), and
//! the error a backend call ends in, classified for the breaker.

use std::error::Error as StdError;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use http_body_util::{BodyExt, Empty};
use hyper::body::Bytes;
use hyper::header::RETRY_AFTER;
use hyper::{HeaderMap, StatusCode};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use hystrix::Class;
use serde::de::DeserializeOwned;

/// A count of the calls a client has under way: each holds a connection (and, for the
/// blocking client, the calling thread) from the request's start until its answer is read or
/// the call is dropped. Clones share the count.
#[derive(Debug, Clone, Default)]
pub struct InFlight(Arc<AtomicU64>);

impl InFlight {
    /// The calls under way now.
    pub fn now(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Counts one call until the guard is dropped.
    pub fn enter(&self) -> InFlightGuard {
        self.0.fetch_add(1, Ordering::Relaxed);
        InFlightGuard(self.clone())
    }
}

/// One call counted in an [`InFlight`] until dropped.
#[derive(Debug)]
pub struct InFlightGuard(InFlight);

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        (self.0).0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The async client (hyper-util's pooled client: keeps connections to each backend open
/// between calls), counting its calls under way. Clones share the connections and the count.
#[derive(Debug, Clone)]
pub struct HttpClient {
    client: Client<HttpConnector, Empty<Bytes>>,
    calls: InFlight,
}

impl HttpClient {
    /// Its calls under way (shared by its clones).
    pub fn in_flight(&self) -> &InFlight {
        &self.calls
    }
}

/// How long a blocking call may take in all before ureq gives up; longer than `GetTitle`'s
/// timeout, so a slow call holds its pool thread after the caller was answered (as a real
/// blocking client does: the thread cannot be interrupted).
pub const BLOCKING_CALL_LIMIT: Duration = Duration::from_secs(1);

/// A new async client (connect timeout 200 ms, no Nagle delay).
pub fn async_client() -> HttpClient {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(Some(Duration::from_millis(200)));
    connector.set_nodelay(true);
    HttpClient {
        client: Client::builder(TokioExecutor::new()).build(connector),
        calls: InFlight::default(),
    }
}

/// The blocking client (ureq), counting its calls under way. Clones share the connections
/// and the count.
#[derive(Debug, Clone)]
pub struct BlockingClient {
    agent: ureq::Agent,
    calls: InFlight,
}

impl BlockingClient {
    /// Its calls under way (shared by its clones); each holds a thread too.
    pub fn in_flight(&self) -> &InFlight {
        &self.calls
    }

    /// The ureq agent, for calls other than [`get_json_blocking`] (not counted).
    #[cfg(test)]
    pub fn agent(&self) -> &ureq::Agent {
        &self.agent
    }
}

/// A new blocking client: plain HTTP, no proxy, a whole-call limit of
/// [`BLOCKING_CALL_LIMIT`], non-2xx answers as values (the caller classifies them).
pub fn blocking_client() -> BlockingClient {
    blocking_client_within(BLOCKING_CALL_LIMIT)
}

/// A new blocking client as [`blocking_client`], with a whole-call limit of `limit`.
pub fn blocking_client_within(limit: Duration) -> BlockingClient {
    let agent = ureq::Agent::config_builder()
        .proxy(None)
        .timeout_global(Some(limit))
        .http_status_as_error(false)
        .max_idle_connections_per_host(32)
        .build()
        .into();
    BlockingClient {
        agent,
        calls: InFlight::default(),
    }
}

/// Why a backend call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// No answer: connection refused or reset, or the call timed out in the client.
    #[error("no answer: {0}")]
    Transport(String),
    /// An answer that is not a success.
    #[error("answered {status}{}", retry_after.as_ref().map(|v| format!(" (Retry-After: {v})")).unwrap_or_default())]
    Status {
        /// The HTTP status.
        status: u16,
        /// The `Retry-After` header, when sent.
        retry_after: Option<String>,
    },
    /// A success whose body is not the JSON expected.
    #[error("unreadable answer: {0}")]
    Body(String),
}

impl BackendError {
    fn status(status: StatusCode, headers: &HeaderMap) -> BackendError {
        BackendError::Status {
            status: status.as_u16(),
            retry_after: headers
                .get(RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .map(str::to_owned),
        }
    }
}

/// How the breaker counts a backend error: a `503`/`429` with `Retry-After` trips it now, for
/// at least that long (accelerated tripping); another `4xx` is the gateway's own mistake (a
/// bad request: not counted, no fallback); everything else is a failure.
pub fn classify(error: &BackendError) -> Class {
    match error {
        BackendError::Status {
            status: 503 | 429,
            retry_after: Some(value),
        } => Class::TripNow {
            min_open: hystrix::http::retry_after(value, SystemTime::now()),
        },
        BackendError::Status {
            status: 400..=499, ..
        } => Class::BadRequest,
        _ => Class::Failure,
    }
}

/// An error and its sources, e.g. `client error (Connect): tcp connect error: Connection
/// refused (os error 111)`.
pub fn error_chain(error: &dyn StdError) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `GET url`: the status, headers and body, or why there is no answer.
pub async fn get(
    client: &HttpClient,
    url: &str,
) -> Result<(StatusCode, HeaderMap, Bytes), BackendError> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|err: hyper::http::uri::InvalidUri| BackendError::Transport(err.to_string()))?;
    let _call = client.calls.enter();
    let response = client
        .client
        .get(uri)
        .await
        .map_err(|err| BackendError::Transport(error_chain(&err)))?;
    let (parts, body) = response.into_parts();
    let body = body
        .collect()
        .await
        .map_err(|err| BackendError::Transport(error_chain(&err)))?
        .to_bytes();
    Ok((parts.status, parts.headers, body))
}

/// `GET url` with the async client, handing each line of the answer's body (without its
/// `\n`) to `on_line` as it comes, until the body ends: for a stream of Server-Sent Events.
///
/// # Errors
/// The request fails, is answered other than `2xx`, or the body breaks off.
pub async fn read_lines(
    client: &HttpClient,
    url: &str,
    mut on_line: impl FnMut(&str),
) -> Result<(), BackendError> {
    let uri: hyper::Uri = url
        .parse()
        .map_err(|err: hyper::http::uri::InvalidUri| BackendError::Transport(err.to_string()))?;
    let response = client
        .client
        .get(uri)
        .await
        .map_err(|err| BackendError::Transport(error_chain(&err)))?;
    if !response.status().is_success() {
        return Err(BackendError::status(response.status(), response.headers()));
    }
    let mut body = response.into_body();
    let mut pending: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|err| BackendError::Transport(error_chain(&err)))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        while let Some(end) = pending.iter().position(|&byte| byte == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            on_line(&String::from_utf8_lossy(&line[..end]));
        }
    }
    Ok(())
}

/// `GET url` with the async client, decoding a successful answer's JSON.
pub async fn get_json<T: DeserializeOwned>(
    client: &HttpClient,
    url: &str,
) -> Result<T, BackendError> {
    let (status, headers, body) = get(client, url).await?;
    if !status.is_success() {
        return Err(BackendError::status(status, &headers));
    }
    serde_json::from_slice(&body).map_err(|err| BackendError::Body(err.to_string()))
}

/// `GET url` with the blocking client, decoding a successful answer's JSON.
pub fn get_json_blocking<T: DeserializeOwned>(
    client: &BlockingClient,
    url: &str,
) -> Result<T, BackendError> {
    let _call = client.calls.enter();
    let mut response = client
        .agent
        .get(url)
        .call()
        .map_err(|err| BackendError::Transport(error_chain(&err)))?;
    if !response.status().is_success() {
        return Err(BackendError::status(response.status(), response.headers()));
    }
    let text = response
        .body_mut()
        .read_to_string()
        .map_err(|err| BackendError::Transport(error_chain(&err)))?;
    serde_json::from_str(&text).map_err(|err| BackendError::Body(err.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(status: u16, retry_after: Option<&str>) -> BackendError {
        BackendError::Status {
            status,
            retry_after: retry_after.map(str::to_owned),
        }
    }

    #[test]
    fn retry_after_trips_now_for_that_long() {
        assert_eq!(
            classify(&status(503, Some("1"))),
            Class::TripNow {
                min_open: Some(Duration::from_secs(1))
            }
        );
        assert_eq!(
            classify(&status(429, Some("7"))),
            Class::TripNow {
                min_open: Some(Duration::from_secs(7))
            }
        );
        // A header that is neither form still asks for a pause: the usual open duration.
        assert_eq!(
            classify(&status(503, Some("soon"))),
            Class::TripNow { min_open: None }
        );
    }

    #[test]
    fn other_errors_are_failures_or_bad_requests() {
        assert_eq!(classify(&status(503, None)), Class::Failure);
        assert_eq!(classify(&status(500, None)), Class::Failure);
        assert_eq!(classify(&status(404, None)), Class::BadRequest);
        assert_eq!(
            classify(&BackendError::Transport("refused".into())),
            Class::Failure
        );
        assert_eq!(classify(&BackendError::Body("eof".into())), Class::Failure);
    }

    #[test]
    fn errors_say_what_came_back() {
        assert_eq!(
            status(503, Some("1")).to_string(),
            "answered 503 (Retry-After: 1)"
        );
        assert_eq!(status(500, None).to_string(), "answered 500");
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let wrapped = std::io::Error::other(io);
        assert_eq!(error_chain(&wrapped), "refused");
    }
}
