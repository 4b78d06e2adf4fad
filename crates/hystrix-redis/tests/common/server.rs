//! A redis-server of the test's own: started on 127.0.0.1 at a free port as a child process,
//! killed on drop. `scripts/test redis` installs Debian's redis-server; `REDIS_SERVER` may
//! name another binary. Without one the test fails: it is never skipped.

#![allow(dead_code, clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// The runtime the tests and the bench run their stores and registries on: 2 workers, IO and
/// time enabled.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub struct RedisServer {
    port: u16,
    child: Option<Child>,
}

fn binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

impl RedisServer {
    /// A server on a free port, answering PING.
    pub fn start() -> Self {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .expect("a free port on 127.0.0.1");
        let mut server = RedisServer { port, child: None };
        server.spawn();
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn spawn(&mut self) {
        let child = Command::new(binary())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--enable-debug-command", "local"])
            .args(["--dir", &std::env::temp_dir().to_string_lossy()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|err| {
                panic!(
                    "cannot start `{}` ({err}): run `scripts/test redis`, which installs \
                     Debian's redis-server, or set REDIS_SERVER",
                    binary()
                )
            });
        self.child = Some(child);
        let until = Instant::now() + Duration::from_secs(10);
        while self.try_command(&["PING"]).as_deref() != Some("+PONG") {
            assert!(Instant::now() < until, "redis-server did not answer PING");
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (SIGKILL): connections drop, state is lost.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills it (if running) and starts an empty one on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Sends one command (its words as RESP bulk strings) and returns the first reply line,
    /// e.g. `+OK`, `:42`, `$5`; `None` if the server cannot be reached.
    pub fn try_command(&self, words: &[&str]) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let mut request = format!("*{}\r\n", words.len());
        for word in words {
            request.push_str(&format!("${}\r\n{word}\r\n", word.len()));
        }
        stream.write_all(request.as_bytes()).ok()?;
        let mut reply = Vec::new();
        let mut byte = [0u8; 1];
        while !reply.ends_with(b"\r\n") {
            stream.read_exact(&mut byte).ok()?;
            reply.push(byte[0]);
        }
        reply.truncate(reply.len() - 2);
        Some(String::from_utf8_lossy(&reply).into_owned())
    }

    /// [`try_command`](Self::try_command), which must reach the server.
    pub fn command(&self, words: &[&str]) -> String {
        self.try_command(words)
            .unwrap_or_else(|| panic!("redis-server did not answer {words:?}"))
    }

    /// Runs `DEBUG SLEEP <seconds>` on a thread of its own: the server stops answering
    /// everyone for that long.
    pub fn sleep_in_background(&self, seconds: &str) -> thread::JoinHandle<()> {
        let port = self.port;
        let seconds = seconds.to_owned();
        let server = RedisServer { port, child: None };
        thread::spawn(move || {
            let reply = server.try_command(&["DEBUG", "SLEEP", &seconds]);
            assert_eq!(reply.as_deref(), Some("+OK"));
        })
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}
