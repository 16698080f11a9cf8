//! A monitored backend for health-check tests: a real HTTP/1.0 server on loopback that the test
//! starts, stops (its port then refuses connections) and restarts on the same port, answering
//! healthy, failing (503) or slowly, and recording when each request (probe) arrived.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How the backend answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    /// `200 OK`, body `ok`.
    Healthy = 0,
    /// `503 Service Unavailable`.
    Failing = 1,
    /// The next request is answered after [`SLOW`] (then healthy again).
    SlowOnce = 2,
}

/// How long a slow reply takes.
pub const SLOW: Duration = Duration::from_secs(2);

pub struct Backend {
    pub addr: SocketAddr,
    reply: Arc<AtomicU8>,
    hits: Arc<Mutex<Vec<Instant>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Backend {
    /// A healthy backend on a free loopback port.
    pub fn start() -> Backend {
        Backend::start_on("127.0.0.1:0".parse().expect("address"))
    }

    /// A healthy backend on `addr` (e.g. the address of one stopped before).
    pub fn start_on(addr: SocketAddr) -> Backend {
        let listener = bind_retrying(addr);
        let addr = listener.local_addr().expect("local address");
        let reply = Arc::new(AtomicU8::new(Reply::Healthy as u8));
        let hits = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (reply, hits, stop) = (reply.clone(), hits.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let (reply, hits) = (reply.clone(), hits.clone());
                    std::thread::spawn(move || serve(stream, &reply, &hits));
                }
            })
        };
        Backend {
            addr,
            reply,
            hits,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://addr/health`.
    pub fn url(&self) -> String {
        format!("http://{}/health", self.addr)
    }

    pub fn set(&self, reply: Reply) {
        self.reply.store(reply as u8, Ordering::SeqCst);
    }

    /// Requests received so far.
    pub fn hits(&self) -> usize {
        self.hits.lock().map_or(0, |h| h.len())
    }

    /// When each request arrived.
    pub fn hit_times(&self) -> Vec<Instant> {
        self.hits.lock().map_or_else(|_| Vec::new(), |h| h.clone())
    }

    /// Waits until at least `n` requests have arrived; false after `timeout`.
    pub fn wait_hits(&self, n: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.hits() >= n {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.hits() >= n
    }

    /// Closes the listening socket: connections to the port are refused from now on.
    pub fn stop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Binding the port of a backend just stopped can race the old socket's close.
fn bind_retrying(addr: SocketAddr) -> TcpListener {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match TcpListener::bind(addr) {
            Ok(listener) => return listener,
            Err(e) if Instant::now() > deadline => panic!("bind {addr}: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn serve(mut stream: TcpStream, reply: &AtomicU8, hits: &Mutex<Vec<Instant>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    // A TCP check connects and closes without a request: that counts as a hit too.
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    if let Ok(mut hits) = hits.lock() {
        hits.push(Instant::now());
    }
    if request.is_empty() {
        return;
    }
    let mode = reply.load(Ordering::SeqCst);
    let response: &[u8] = if mode == Reply::Failing as u8 {
        b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 5\r\n\r\nbusy\n"
    } else {
        if mode == Reply::SlowOnce as u8 {
            reply.store(Reply::Healthy as u8, Ordering::SeqCst);
            std::thread::sleep(SLOW);
        }
        b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n"
    };
    let _ = stream.write_all(response);
}

/// A loopback address where nothing listens (bound, then closed).
pub fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local address")
}
