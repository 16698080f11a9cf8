//! A real etcd for tests (Debian's `etcd-server`, `/usr/bin/etcd`): one member on loopback,
//! on free ports, with a temporary data directory. [`Etcd::start`] waits until it reports
//! healthy; [`Etcd::stop`] kills it (a crash, as far as clients can tell); [`Etcd::restart`]
//! brings it back on the same ports with the same data; dropping it stops it and removes the
//! data. A machine without etcd fails the test (CI installs it: `.ci/run`).
//!
//! [`EtcdCluster::start`] runs several members as one cluster (each member an [`Etcd`] that
//! can be stopped and restarted alone), for tests where a member dies under load.
//!
//! [`Etcd::start_secure`] runs it as production clusters do: TLS with client certificates
//! (a CA, server and client certificates made with the `openssl` command), and
//! [`Etcd::enable_auth`] turns on etcd's users and roles.

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
    /// Set for a TLS etcd: the certificates clients need.
    pki: Option<Pki>,
    /// Set once auth is on: `root:PASSWORD` for etcdctl.
    root: Option<String>,
    /// The member's name and, for a member of an [`EtcdCluster`], every member's
    /// `name=peer-url` (etcd's `--initial-cluster`).
    member: String,
    initial_cluster: Option<String>,
}

/// PEM files of a TLS etcd: the CA that signed everything, and a client certificate and key.
#[derive(Clone)]
pub struct Pki {
    pub ca: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    server_cert: PathBuf,
    server_key: PathBuf,
}

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let output = Command::new("openssl")
        .current_dir(dir)
        .args(args)
        .output()
        .expect("openssl must be installed (apt-get install openssl); .ci/run installs it");
    assert!(
        output.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A CA, a server certificate for 127.0.0.1/localhost and a client certificate, in `dir`.
fn make_pki(dir: &std::path::Path) -> Pki {
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let ca = [
        ec.as_slice(),
        &["-x509", "-keyout", "ca.key", "-out", "ca.pem"],
    ]
    .concat();
    openssl(
        dir,
        &[
            &["req"],
            ca.as_slice(),
            &["-days", "2", "-subj", "/CN=steerdns test CA"],
        ]
        .concat(),
    );
    for (name, cn, usage) in [
        (
            "server",
            "etcd",
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth",
        ),
        ("client", "steerdns", "extendedKeyUsage=clientAuth"),
    ] {
        let (key, csr, pem, ext) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
            format!("{name}.ext"),
        );
        let subject = format!("/CN={cn}");
        let request = [
            ec.as_slice(),
            &["-keyout", &key, "-out", &csr, "-subj", &subject],
        ]
        .concat();
        openssl(dir, &[&["req"], request.as_slice()].concat());
        std::fs::write(dir.join(&ext), usage).expect("extensions file");
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-days",
                "2",
                "-out",
                &pem,
                "-extfile",
                &ext,
            ],
        );
    }
    Pki {
        ca: dir.join("ca.pem"),
        client_cert: dir.join("client.pem"),
        client_key: dir.join("client.key"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
    }
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
            pki: None,
            root: None,
            member: "test".into(),
            initial_cluster: None,
        };
        etcd.spawn();
        etcd
    }

    /// Starts etcd serving TLS only and requiring a client certificate signed by its CA.
    pub fn start_secure() -> Etcd {
        let dir = TempDir::new("etcd-tls");
        let pki = make_pki(dir.path());
        let mut etcd = Etcd {
            child: None,
            client_port: free_tcp_port(),
            peer_port: free_tcp_port(),
            dir,
            pki: Some(pki),
            root: None,
            member: "test".into(),
            initial_cluster: None,
        };
        etcd.spawn();
        etcd
    }

    /// The certificates a client of a TLS etcd needs.
    pub fn pki(&self) -> Option<&Pki> {
        self.pki.as_ref()
    }

    /// A file in etcd's scratch directory (e.g. a password file for a client).
    pub fn write_file(&self, name: &str, text: &str) -> PathBuf {
        let path = self.dir.path().join(name);
        std::fs::write(&path, text).expect("write file");
        path
    }

    /// Turns on etcd's authentication with `user`/`password` allowed to read and write only
    /// the keys under `prefix` (and a root user for etcdctl).
    pub fn enable_auth(&mut self, user: &str, password: &str, prefix: &str) {
        self.etcdctl(&["user", "add", "root:root-secret-password"]);
        self.etcdctl(&["user", "grant-role", "root", "root"]);
        self.etcdctl(&["role", "add", "fleet"]);
        self.etcdctl(&[
            "role",
            "grant-permission",
            "fleet",
            "--prefix=true",
            "readwrite",
            prefix,
        ]);
        self.etcdctl(&["user", "add", &format!("{user}:{password}")]);
        self.etcdctl(&["user", "grant-role", user, "fleet"]);
        self.etcdctl(&["auth", "enable"]);
        self.root = Some("root:root-secret-password".into());
    }

    /// `http://127.0.0.1:PORT` (`https://` for a TLS etcd), for `[fleet] etcd`.
    pub fn endpoint(&self) -> String {
        let scheme = if self.pki.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn spawn(&mut self) {
        self.spawn_unchecked();
        self.wait_healthy();
    }

    fn peer_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.peer_port)
    }

    /// Starts the etcd process without waiting for it to be healthy (a cluster member is
    /// healthy only once a quorum of its peers runs).
    fn spawn_unchecked(&mut self) {
        let client = self.endpoint();
        let peer = self.peer_url();
        let cluster = self
            .initial_cluster
            .clone()
            .unwrap_or_else(|| format!("{}={peer}", self.member));
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("etcd.log"))
            .expect("etcd log file");
        let child = Command::new("etcd")
            .args(["--name", &self.member])
            .arg("--data-dir")
            .arg(self.data_dir())
            .args(["--listen-client-urls", &client])
            .args(["--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer])
            .args(["--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &cluster])
            .args(["--initial-cluster-state", "new"])
            .args(self.pki.iter().flat_map(|pki| {
                [
                    "--client-cert-auth".into(),
                    "--cert-file".into(),
                    pki.server_cert.clone().into_os_string(),
                    "--key-file".into(),
                    pki.server_key.clone().into_os_string(),
                    "--trusted-ca-file".into(),
                    pki.ca.clone().into_os_string(),
                ]
            }))
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

    /// One `GET /health` (for a TLS etcd: `etcdctl endpoint health`).
    pub fn healthy(&self) -> bool {
        if self.pki.is_some() {
            return self
                .etcdctl_command(&["endpoint", "health"])
                .output()
                .is_ok_and(|o| o.status.success());
        }
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
        let output = self
            .etcdctl_command(args)
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

impl Etcd {
    fn etcdctl_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new("etcdctl");
        command
            .env("ETCDCTL_API", "3")
            .arg("--endpoints")
            .arg(self.endpoint());
        if let Some(pki) = &self.pki {
            command
                .arg("--cacert")
                .arg(&pki.ca)
                .arg("--cert")
                .arg(&pki.client_cert)
                .arg("--key")
                .arg(&pki.client_key);
        }
        if let Some(root) = &self.root {
            command.args(["--user", root]);
        }
        command.args(args);
        command
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Several etcd members forming one cluster on loopback (plain HTTP). Each member can be
/// stopped and restarted on its own ([`Etcd::stop`], [`Etcd::restart`]); a restarted member
/// rejoins with its data directory.
pub struct EtcdCluster {
    pub members: Vec<Etcd>,
}

impl EtcdCluster {
    /// Starts `n` members and waits (bounded) until each reports healthy.
    pub fn start(n: usize) -> EtcdCluster {
        let mut members: Vec<Etcd> = (0..n)
            .map(|i| Etcd {
                child: None,
                client_port: free_tcp_port(),
                peer_port: free_tcp_port(),
                dir: TempDir::new(&format!("etcd-m{i}")),
                pki: None,
                root: None,
                member: format!("m{i}"),
                initial_cluster: None,
            })
            .collect();
        let cluster = members
            .iter()
            .map(|m| format!("{}={}", m.member, m.peer_url()))
            .collect::<Vec<_>>()
            .join(",");
        for member in &mut members {
            member.initial_cluster = Some(cluster.clone());
            member.spawn_unchecked();
        }
        for member in &mut members {
            member.wait_healthy();
        }
        EtcdCluster { members }
    }

    /// Every member's client URL, for `[fleet] etcd`.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(Etcd::endpoint).collect()
    }

    /// A running member, for etcdctl.
    pub fn any_running(&mut self) -> Option<&Etcd> {
        let i = (0..self.members.len()).find(|&i| self.members[i].is_running())?;
        Some(&self.members[i])
    }
}
