//! One instance's reader: connects to its stream, keeps its latest message per (type, name),
//! and reconnects with backoff when the stream fails or goes silent.

use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::Bytes;
use axum::http::{Request, StatusCode, header};
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use super::instances::InstanceUrl;
use super::merge::InstanceRecords;
use super::{Settings, Status};

/// The longest line read from an instance (a command message is about 2 KB); a longer one
/// ends the connection, so a stream without newlines cannot grow the buffer without bound.
pub(crate) const MAX_LINE: usize = 256 * 1024;

/// Lines taken from one instance per second at most (two ticks' worth of its most records);
/// past it, the rest of the second's lines are skipped, so that an instance that floods its
/// stream costs a bounded share of a core.
pub(crate) const MAX_LINES_PER_SECOND: u64 = 2 * super::merge::MAX_RECORDS as u64;

/// One instance: where it is and what it last said.
#[derive(Debug)]
pub(crate) struct Instance {
    pub(crate) url: InstanceUrl,
    state: Mutex<InstanceState>,
}

#[derive(Debug, Default)]
pub(crate) struct InstanceState {
    pub(crate) records: InstanceRecords,
    /// When the last message came ([`Clock::now_ms`](hystrix::clock::Clock::now_ms)).
    pub(crate) last_message_ms: Option<u64>,
    pub(crate) connected: bool,
    pub(crate) messages: u64,
    pub(crate) last_error: Option<String>,
}

impl Instance {
    pub(crate) fn new(url: InstanceUrl) -> Instance {
        Instance {
            url,
            state: Mutex::new(InstanceState::default()),
        }
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, InstanceState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes one line of the stream.
    pub(crate) fn line(&self, line: &[u8], now_ms: u64) {
        let Some(json) = line.strip_prefix(b"data:") else {
            return; // pings, comments, `event:` lines
        };
        let Ok(json) = std::str::from_utf8(json) else {
            self.state().last_error = Some("a message that is not UTF-8: refused".to_owned());
            return;
        };
        let json = json.trim();
        if json.is_empty() {
            return;
        }
        let mut state = self.state();
        match state.records.ingest(json) {
            Ok(_) => {
                state.messages += 1;
                state.last_message_ms = Some(now_ms);
            }
            Err(err) => state.last_error = Some(err.to_string()),
        }
    }

    /// The instance went away: its records no longer count.
    fn lost(&self, why: String) {
        let mut state = self.state();
        state.connected = false;
        state.records.clear();
        state.last_message_ms = None;
        state.last_error = Some(why);
    }

    pub(crate) fn status(&self, now_ms: u64, timeout_ms: u64) -> Status {
        let state = self.state();
        Status {
            url: self.url.to_string(),
            connected: state.connected,
            reporting: state.reporting(now_ms, timeout_ms),
            messages: state.messages,
            records: state.records.len(),
            bytes: state.records.own_bytes(),
            last_error: state.last_error.clone(),
        }
    }
}

impl InstanceState {
    /// Whether a message came within `timeout_ms` of `now_ms`.
    pub(crate) fn reporting(&self, now_ms: u64, timeout_ms: u64) -> bool {
        self.last_message_ms
            .is_some_and(|at| now_ms.saturating_sub(at) < timeout_ms)
    }
}

/// Reads `instance` until the task is aborted: connect, read, and on any failure or silence
/// forget its records and try again after a backoff that doubles from `reconnect_min` to
/// `reconnect_max` (back to the start once a connection delivers a message).
pub(crate) async fn run(instance: Arc<Instance>, settings: Arc<Settings>) {
    let mut delay = settings.reconnect_min;
    loop {
        let before = instance.state().messages;
        let (why, fault) = match read(&instance, &settings).await {
            Ok(()) => ("the stream ended".to_owned(), false),
            Err(Failure { why, fault }) => (why, fault),
        };
        tracing::debug!(
            target: "hystrix::turbine",
            "turbine instance {}: {why}; reconnecting in {delay:?}",
            instance.url
        );
        instance.lost(why);
        // A connection that delivered messages and then ended or broke starts the backoff
        // over; one that broke the protocol (a line too long) does not, so an instance that
        // keeps doing it is not read again and again.
        if !fault && instance.state().messages > before {
            delay = settings.reconnect_min;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(settings.reconnect_max);
    }
}

/// Why a connection ended: what happened, and whether the instance broke the protocol.
struct Failure {
    why: String,
    fault: bool,
}

impl From<String> for Failure {
    fn from(why: String) -> Failure {
        Failure { why, fault: false }
    }
}

/// One connection: its lines go to the instance until it ends, fails, or is silent for the
/// instance timeout (bytes of any kind reset it: a ping counts).
async fn read(instance: &Instance, settings: &Settings) -> Result<(), Failure> {
    let timeout = settings.instance_timeout;
    let url = &instance.url;
    let stream = tokio::time::timeout(timeout, TcpStream::connect((url.host(), url.port())))
        .await
        .map_err(|_| format!("no connection within {timeout:?}"))?
        .map_err(|err| format!("cannot connect: {err}"))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|err| format!("HTTP handshake failed: {err}"))?;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let _abort = AbortOnDrop(driver);
    let request = Request::get(url.path())
        .header(header::HOST, url.authority())
        .header(header::ACCEPT, "text/event-stream")
        .body(Empty::<Bytes>::new())
        .map_err(|err| format!("bad request: {err}"))?;
    let response = tokio::time::timeout(timeout, sender.send_request(request))
        .await
        .map_err(|_| format!("no answer within {timeout:?}"))?
        .map_err(|err| format!("request failed: {err}"))?;
    if response.status() != StatusCode::OK {
        return Err(format!("answered {}", response.status()).into());
    }
    let kind = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !kind.trim_start().starts_with("text/event-stream") {
        return Err(Failure {
            why: format!("answered Content-Type `{kind}`, not text/event-stream"),
            fault: true,
        });
    }
    instance.state().connected = true;
    let mut body = response.into_body();
    let mut buffer: Vec<u8> = Vec::with_capacity(8 * 1024);
    let mut second = tokio::time::Instant::now();
    let mut lines: u64 = 0;
    loop {
        let frame = match tokio::time::timeout(timeout, body.frame()).await {
            Err(_) => return Err(format!("nothing received for {timeout:?}").into()),
            Ok(None) => return Ok(()),
            Ok(Some(Err(err))) => return Err(format!("read failed: {err}").into()),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        buffer.extend_from_slice(&data);
        let now_ms = settings.clock.now_ms();
        if second.elapsed() >= std::time::Duration::from_secs(1) {
            if lines > MAX_LINES_PER_SECOND {
                instance.state().last_error = Some(format!(
                    "{} lines in a second: the {} past {MAX_LINES_PER_SECOND} were skipped",
                    lines,
                    lines - MAX_LINES_PER_SECOND
                ));
            }
            second = tokio::time::Instant::now();
            lines = 0;
        }
        let mut start = 0;
        while let Some(end) = buffer[start..].iter().position(|&b| b == b'\n') {
            let line = &buffer[start..start + end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.starts_with(b"data:") {
                lines += 1;
                if lines <= MAX_LINES_PER_SECOND {
                    instance.line(line, now_ms);
                }
            }
            start += end + 1;
        }
        buffer.drain(..start);
        if buffer.len() > MAX_LINE {
            return Err(Failure {
                why: format!("a line longer than {MAX_LINE} bytes"),
                fault: true,
            });
        }
    }
}

/// Aborts a task when dropped.
#[derive(Debug)]
pub(crate) struct AbortOnDrop(pub(crate) tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
