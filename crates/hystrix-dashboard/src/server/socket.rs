//! An accepted connection's socket with its three clocks: the request-read timeout, the idle
//! timeout and the write timeout (see [`Limits`](super::Limits)).
//!
//! hyper has no idle or write timeout, and its header-read timeout also runs while a kept-alive
//! connection waits for its next request (so an idle connection could not outlive it); so the
//! clocks live here, on the socket's reads and writes, where a stalled client shows: a read
//! that waits or a write that stays blocked past its deadline fails with
//! [`io::ErrorKind::TimedOut`], hyper ends the connection, and the response body, with any
//! stream slot it holds, is dropped. They run on tokio's timer while hyper waits on the socket:
//! no task of their own.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use axum::body::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

use super::Limits;

/// A timeout longer than this never fires in practice; capping at it keeps `Instant + Duration`
/// from overflowing whatever a builder was given (100 years).
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

fn deadline(start: Instant, timeout: Duration) -> Instant {
    start + timeout.min(FOREVER)
}

/// When the request being read began (its first byte, or the connection's opening for the
/// first request), shared by the socket, which sees bytes arrive, and the request's body,
/// which knows when the request has been read. `None` between requests.
#[derive(Debug)]
pub(super) struct RequestClock(Mutex<Option<Instant>>);

impl RequestClock {
    /// A clock for a connection opened at `opened`: its first request is timed from there.
    pub(super) fn opened_at(opened: Instant) -> Arc<Self> {
        Arc::new(RequestClock(Mutex::new(Some(opened))))
    }

    fn started(&self) -> Option<Instant> {
        *self.lock()
    }

    /// Bytes arrived at `now`: between requests, they begin the next one.
    fn bytes_arrived(&self, now: Instant) {
        self.lock().get_or_insert(now);
    }

    /// The request, head and body, has been read.
    fn request_read(&self) {
        *self.lock() = None;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        self.0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A request's body that stops the request-read clock when it has been read, or dropped
/// (the handler did not want it: hyper then drains or closes the rest).
pub(super) struct RequestBody {
    body: hyper::body::Incoming,
    clock: Option<Arc<RequestClock>>,
}

impl RequestBody {
    /// `body` of a request whose head has just been read.
    pub(super) fn new(body: hyper::body::Incoming, clock: Arc<RequestClock>) -> Self {
        let mut body = RequestBody {
            body,
            clock: Some(clock),
        };
        if body.body.is_end_stream() {
            body.read();
        }
        body
    }

    fn read(&mut self) {
        if let Some(clock) = self.clock.take() {
            clock.request_read();
        }
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        self.read();
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        if !matches!(frame, Some(Ok(_))) || self.body.is_end_stream() {
            self.read();
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// The socket of one accepted connection, with its clocks.
pub(super) struct Socket {
    stream: TcpStream,
    limits: Limits,
    request: Arc<RequestClock>,
    /// When a byte last moved, either way.
    last_progress: Instant,
    /// Since when writes have been blocked; `None` once one goes through.
    blocked_since: Option<Instant>,
    /// Wakes a pending read at its deadline (made on first use, then moved).
    read_timer: Option<Pin<Box<Sleep>>>,
    /// Wakes a blocked write at its deadline.
    write_timer: Option<Pin<Box<Sleep>>>,
}

impl Socket {
    pub(super) fn new(stream: TcpStream, limits: Limits, request: Arc<RequestClock>) -> Self {
        Socket {
            stream,
            limits,
            request,
            last_progress: Instant::now(),
            blocked_since: None,
            read_timer: None,
            write_timer: None,
        }
    }

    /// A read is waiting: the error to end the connection with, if its deadline has passed
    /// (else `cx` is woken at the deadline). While a request is being read, the earlier of its
    /// request-read deadline and the idle deadline; between requests, the idle deadline.
    fn read_timed_out(&mut self, cx: &mut Context<'_>) -> Option<io::Error> {
        let Limits {
            request_read, idle, ..
        } = self.limits;
        let idle = (
            deadline(self.last_progress, idle),
            "no byte either way",
            idle,
        );
        let (at, what, after) = self
            .request
            .started()
            .map(|started| {
                let read_by = deadline(started, request_read);
                (read_by, "a request not read whole", request_read)
            })
            .filter(|(read_by, ..)| *read_by < idle.0)
            .unwrap_or(idle);
        passed(&mut self.read_timer, at, cx).then(|| timed_out(what, after))
    }

    /// Checks a write's outcome against the write timeout.
    fn guard_write(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        match written {
            Poll::Pending => {
                let since = *self.blocked_since.get_or_insert_with(Instant::now);
                let at = deadline(since, self.limits.write);
                if passed(&mut self.write_timer, at, cx) {
                    let what = "a write blocked (the client takes nothing)";
                    return Poll::Ready(Err(timed_out(what, self.limits.write)));
                }
                Poll::Pending
            }
            Poll::Ready(Ok(n)) if n > 0 => {
                self.blocked_since = None;
                self.last_progress = Instant::now();
                written
            }
            ready => ready,
        }
    }
}

/// Whether `at` has passed; if not, `timer` wakes `cx` then.
fn passed(timer: &mut Option<Pin<Box<Sleep>>>, at: Instant, cx: &mut Context<'_>) -> bool {
    if Instant::now() >= at {
        return true;
    }
    let sleep = timer.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(at)));
    if sleep.deadline() != at {
        sleep.as_mut().reset(at);
    }
    sleep.as_mut().poll(cx).is_ready()
}

fn timed_out(what: &str, after: Duration) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!("{what} for {} ms", after.as_millis()),
    )
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                let now = Instant::now();
                this.last_progress = now;
                this.request.bytes_arrived(now);
                Poll::Ready(Ok(()))
            }
            Poll::Pending => match this.read_timed_out(cx) {
                Some(err) => Poll::Ready(Err(err)),
                None => Poll::Pending,
            },
            ready => ready,
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write(cx, buf);
        this.guard_write(cx, written)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let written = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        this.guard_write(cx, written)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}
