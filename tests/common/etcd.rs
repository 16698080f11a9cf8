//! A real etcd for tests (Debian's `etcd-server`, `/usr/bin/etcd`): one member on loopback,
//! on free ports, with a temporary data directory. [`Etcd::start`] waits until it reports
//! healthy; [`Etcd::stop`] kills it (a crash, as far as clients can tell); [`Etcd::restart`]
//! brings it back on the same ports with the same data; dropping it stops it and removes the
//! data. A machine without etcd fails the test (CI installs it: `.ci/run`).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::TempDir;

/// How long etcd may take to become healthy (first start includes creating the data dir).
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub struct Etcd {
    child: Option<Child>,
    pub client_port: u16,
    pub peer_port: u16,
    dir: TempDir,
}

/// A TCP port on 127.0.0.1 that is free right now.
pub fn free_tcp_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

impl Etcd {
    /// Starts etcd and waits (bounded) until it is healthy.
    pub fn start() -> Etcd {
        let mut etcd = Etcd {
            child: None,
            client_port: free_tcp_port(),
            peer_port: free_tcp_port(),
            dir: TempDir::new("etcd"),
        };
        etcd.spawn();
        etcd
    }

    /// `http://127.0.0.1:PORT`, for `[fleet] etcd`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn spawn(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("etcd log file");
        let child = Command::new("etcd")
            .args(["--name", "test"])
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("test={peer}")])
            .args(["--initial-cluster-state", "new"])
            .args([
                "--logger",
                "zap",
                "--log-outputs",
                "stderr",
                "--log-level",
                "warn",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd must be installed (apt-get install etcd-server); .ci/run installs it");
        self.child = Some(child);
        self.wait_healthy();
    }

    /// Waits until `GET /health` says `"health":"true"`; panics with etcd's log if it does not
    /// within the start timeout or if etcd exits.
    pub fn wait_healthy(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if self.healthy() {
                return;
            }
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    panic!(
                        "etcd exited ({status}) before it was healthy:\n{}",
                        self.log()
                    );
                }
            }
            assert!(
                Instant::now() < deadline,
                "etcd not healthy within {START_TIMEOUT:?}:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// One `GET /health`.
    pub fn healthy(&self) -> bool {
        let addr = SocketAddr::from(([127, 0, 0, 1], self.client_port));
        let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
            return false;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let request = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        if stream.write_all(request.as_bytes()).is_err() {
            return false;
        }
        let mut response = String::new();
        let _ = stream.read_to_string(&mut response);
        response.contains("\"health\":\"true\"")
    }

    /// Kills etcd (clients see connections drop, as in a crash or partition).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same ports with the same data, and waits until it is healthy.
    pub fn restart(&mut self) {
        self.stop();
        self.spawn();
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// What etcd logged (warnings and errors).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }

    /// Runs `etcdctl` (Debian's etcd-client) against this etcd, returning stdout; panics on
    /// failure.
    pub fn etcdctl(&self, args: &[&str]) -> String {
        let output = Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(self.endpoint())
            .args(args)
            .output()
            .expect("etcdctl must be installed (apt-get install etcd-client)");
        assert!(
            output.status.success(),
            "etcdctl {args:?}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}
