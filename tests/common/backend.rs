//! A monitored backend for health-check tests: a real HTTP/1.0 server on loopback that the test
//! starts, stops (its port then refuses connections) and restarts on the same port, answering
//! healthy, failing (503) or slowly, and recording when each request (probe) arrived and who
//! sent it (its `User-Agent`: a fleet node names itself there).

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

/// One request: when it arrived and its `User-Agent` (empty for a bare TCP connect).
#[derive(Debug, Clone)]
pub struct Hit {
    pub at: Instant,
    pub agent: String,
}

pub struct Backend {
    pub addr: SocketAddr,
    reply: Arc<AtomicU8>,
    hits: Arc<Mutex<Vec<Hit>>>,
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
        self.hit_list().iter().map(|h| h.at).collect()
    }

    /// Every request so far.
    pub fn hit_list(&self) -> Vec<Hit> {
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

fn serve(mut stream: TcpStream, reply: &AtomicU8, hits: &Mutex<Vec<Hit>>) {
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
    let text = String::from_utf8_lossy(&request);
    let agent = text
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("user-agent")
                .then(|| value.trim().to_string())
        })
        .unwrap_or_default();
    if let Ok(mut hits) = hits.lock() {
        hits.push(Hit {
            at: Instant::now(),
            agent,
        });
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

/// A monitored DNS server for health-check tests: a UDP responder on loopback that answers
/// every query with its question and the rcode it is set to (0: NOERROR), or not at all
/// ([`DnsBackend::set_silent`]), and counts the queries.
pub struct DnsBackend {
    pub addr: SocketAddr,
    /// The rcode answered, or [`SILENT`] for no answer.
    rcode: Arc<AtomicU8>,
    queries: Arc<std::sync::atomic::AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// [`DnsBackend`] rcode value meaning "do not answer".
const SILENT: u8 = 0xff;

impl DnsBackend {
    pub fn start() -> DnsBackend {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind a UDP port");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .expect("read timeout");
        let addr = socket.local_addr().expect("local address");
        let rcode = Arc::new(AtomicU8::new(0));
        let queries = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (rcode, queries, stop) = (rcode.clone(), queries.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 512];
                while !stop.load(Ordering::SeqCst) {
                    let Ok((n, peer)) = socket.recv_from(&mut buf) else {
                        continue;
                    };
                    if n < 12 {
                        continue;
                    }
                    queries.fetch_add(1, Ordering::SeqCst);
                    let code = rcode.load(Ordering::SeqCst);
                    if code == SILENT {
                        continue;
                    }
                    let reply = &mut buf[..n];
                    reply[2] |= 0x80; // QR
                    reply[3] = (reply[3] & 0xf0) | (code & 0x0f);
                    let _ = socket.send_to(reply, peer);
                }
            })
        };
        DnsBackend {
            addr,
            rcode,
            queries,
            stop,
            thread: Some(thread),
        }
    }

    /// Answers with `rcode` from now on (0: NOERROR, 2: SERVFAIL, 5: REFUSED).
    pub fn set_rcode(&self, rcode: u8) {
        self.rcode.store(rcode & 0x0f, Ordering::SeqCst);
    }

    /// Stops answering (queries time out).
    pub fn set_silent(&self) {
        self.rcode.store(SILENT, Ordering::SeqCst);
    }

    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::SeqCst)
    }
}

impl Drop for DnsBackend {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A monitored HTTPS backend: Debian's `openssl s_server -www` on a free loopback port with a
/// self-signed certificate (CN ns1.example.net, SAN IP 127.0.0.1) made by the `openssl`
/// command; it answers every GET with `200 ok` and an HTML status page. Killed on drop.
pub struct TlsBackend {
    pub addr: SocketAddr,
    /// The certificate's PEM file.
    pub cert: std::path::PathBuf,
    child: std::process::Child,
    _dir: super::TempDir,
}

impl TlsBackend {
    pub fn start() -> TlsBackend {
        let dir = super::TempDir::new("tls-backend");
        let (cert, key) = super::self_signed_cert(dir.path(), "backend", 2);
        let addr = closed_port();
        let child = std::process::Command::new("openssl")
            .args(["s_server", "-quiet", "-www", "-accept"])
            .arg(addr.to_string())
            .arg("-cert")
            .arg(&cert)
            .arg("-key")
            .arg(&key)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("openssl must be installed (apt-get install openssl); .ci/run installs it");
        let backend = TlsBackend {
            addr,
            cert,
            child,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            assert!(
                Instant::now() < deadline,
                "openssl s_server not listening on {addr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        backend
    }

    /// `https://addr/PATH`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}/{path}", self.addr)
    }

    /// `sha256:HEX` of the certificate (DER), for `tls = "sha256:..."`.
    pub fn pin(&self) -> String {
        let script = format!(
            "openssl x509 -in '{}' -outform der | openssl dgst -sha256 -r",
            self.cert.display()
        );
        let output = std::process::Command::new("sh")
            .args(["-c", &script])
            .output()
            .expect("run openssl");
        assert!(output.status.success(), "digest: {output:?}");
        let text = String::from_utf8_lossy(&output.stdout);
        format!("sha256:{}", text.split_whitespace().next().unwrap_or(""))
    }
}

impl Drop for TlsBackend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
