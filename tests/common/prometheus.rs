//! A real Prometheus for tests (Debian's `prometheus`, `/usr/bin/prometheus`) on a free
//! loopback port with a temporary data directory, scraping every second a small exporter the
//! test serves ([`Exporter`]: a std `TcpListener` thread answering `GET /metrics` with the text
//! exposition of gauges the test sets). [`Prometheus::start`] waits until `/-/ready` answers and
//! the exporter has been scraped once; [`Prometheus::stop`] kills it; dropping either stops it.
//! A machine without Prometheus fails the test (CI installs it: `.ci/run`).

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::etcd::free_tcp_port;
use super::TempDir;

/// How long Prometheus may take to become ready and scrape the exporter once.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Gauges served as Prometheus text exposition: series (labels text, e.g.
/// `site="eu-west",kind="region"`) → value text (so `NaN` can be served).
pub struct Exporter {
    pub addr: SocketAddr,
    gauges: Arc<Mutex<BTreeMap<String, String>>>,
    scrapes: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl Exporter {
    /// Serves metric `name` with the given series on a free loopback port.
    pub fn start(name: &'static str) -> Exporter {
        let listener = TcpListener::bind("127.0.0.1:0").expect("exporter listener");
        let addr = listener.local_addr().expect("exporter address");
        let gauges: Arc<Mutex<BTreeMap<String, String>>> = Arc::default();
        let scrapes = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (g, s, halt) = (gauges.clone(), scrapes.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if halt.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(stream) = stream else { continue };
                let body = {
                    let gauges = g.lock().unwrap_or_else(|e| e.into_inner());
                    let mut body = format!("# TYPE {name} gauge\n");
                    for (labels, value) in gauges.iter() {
                        body.push_str(&format!("{name}{{{labels}}} {value}\n"));
                    }
                    body
                };
                if answer(stream, &body).is_ok() {
                    s.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        Exporter {
            addr,
            gauges,
            scrapes,
            stop,
        }
    }

    /// Sets one series (`labels` as in the exposition, without braces) to `value`.
    pub fn set(&self, labels: &str, value: &str) {
        self.gauges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(labels.to_string(), value.to_string());
    }

    pub fn remove(&self, labels: &str) {
        self.gauges
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(labels);
    }

    /// How many times it has been scraped.
    pub fn scrapes(&self) -> u64 {
        self.scrapes.load(Ordering::Relaxed)
    }

    /// Waits (bounded) until it has been scraped `n` more times than now: a value set before
    /// the call is then in Prometheus.
    pub fn wait_scraped(&self, n: u64, limit: Duration) {
        let target = self.scrapes() + n;
        super::wait_for(&format!("{n} more scrapes of the exporter"), limit, || {
            (self.scrapes() >= target).then_some(())
        });
    }
}

impl Drop for Exporter {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so that it sees the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
    }
}

fn answer(stream: TcpStream, body: &str) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    // The request head, up to its blank line.
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line == "\r\n" || line == "\n" {
            break;
        }
    }
    let mut stream = reader.into_inner();
    write!(
        stream,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    )
}

pub struct Prometheus {
    child: Option<Child>,
    pub port: u16,
    dir: TempDir,
    /// The certificate it serves HTTPS with ([`Prometheus::start_tls`]); `None`: plain HTTP.
    pub cert: Option<PathBuf>,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` every second and waits (bounded) until it is ready.
    pub fn start(target: SocketAddr) -> Prometheus {
        Self::start_with(target, false)
    }

    /// Like [`Prometheus::start`], serving HTTPS (`--web.config.file`) with a self-signed
    /// certificate for 127.0.0.1 ([`super::self_signed_cert`], its path in [`Prometheus::cert`]).
    pub fn start_tls(target: SocketAddr) -> Prometheus {
        Self::start_with(target, true)
    }

    fn start_with(target: SocketAddr, tls: bool) -> Prometheus {
        let dir = TempDir::new("prometheus");
        let mut web_args = Vec::new();
        let mut served_cert = None;
        if tls {
            let (cert, key) = super::self_signed_cert(dir.path(), "prometheus", 2);
            let web = dir.path().join("web.yml");
            std::fs::write(
                &web,
                format!(
                    "tls_server_config:\n  cert_file: {}\n  key_file: {}\n",
                    cert.display(),
                    key.display()
                ),
            )
            .expect("write web.yml");
            web_args.push(format!("--web.config.file={}", web.display()));
            served_cert = Some(cert);
        }
        let config = dir.path().join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: edge\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .expect("write prometheus.yml");
        let port = free_tcp_port();
        let log = std::fs::File::create(dir.path().join("prometheus.log")).expect("log file");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .args(&web_args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect(
                "prometheus must be installed (apt-get install prometheus); .ci/run installs it",
            );
        let mut prometheus = Prometheus {
            child: Some(child),
            port,
            dir,
            cert: served_cert,
        };
        prometheus.wait_ready();
        prometheus
    }

    /// `http://127.0.0.1:PORT` (`https://` when started with TLS), for
    /// `[shield.prometheus] url`.
    pub fn url(&self) -> String {
        let scheme = if self.cert.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.get("/-/ready").is_some_and(|(code, _)| code == 200) {
                return;
            }
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!("prometheus exited ({status}):\n{}", self.log());
                }
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready within {START_TIMEOUT:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// One GET to Prometheus: (status code, body), or `None` if it does not answer.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        use steerdns::http_client::{parse_base_url, request_url, tls_config, Request};
        let base = parse_base_url(&self.url()).ok()?;
        let tls = match &self.cert {
            Some(cert) => Some(tls_config(Some(cert)).ok()?),
            None => None,
        };
        let request = Request {
            method: "GET",
            path,
            headers: &[],
            body: b"",
        };
        let response = request_url(
            &base,
            tls.as_ref(),
            request,
            Duration::from_secs(5),
            8 << 20,
        )
        .ok()?;
        Some((response.status, response.body))
    }

    /// Kills Prometheus (queries then fail to connect).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.stop();
    }
}
