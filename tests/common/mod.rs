//! Test harness: starts the real `steerdns` binary on loopback and talks to it over real
//! sockets. Every wait is bounded; the server is killed when the handle drops.

#![allow(dead_code)]

pub mod backend;
pub mod etcd;
pub mod load;
pub mod prometheus;
pub mod tls;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, Query};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};

pub const TIMEOUT: Duration = Duration::from_secs(5);

pub fn repo_path(relative: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// A running server process.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    /// The admin endpoint's address, when it is on.
    pub admin: Option<SocketAddr>,
    pub stdout_lines: mpsc::Receiver<String>,
    /// What the server printed on stdout up to and including its `ready` line.
    pub startup: Vec<String>,
}

impl Server {
    /// The bundled zones (`zones/`) served with built-in defaults, run from that directory.
    pub fn bundled() -> Server {
        Server::start_in(&repo_path("zones"), &["--zones", "."])
    }

    /// Starts `steerdns serve` with these extra arguments, listening on 127.0.0.1:0.
    pub fn start(args: &[&str]) -> Server {
        Self::start_in(&repo_path(""), args)
    }

    /// Like [`Server::start`], run from `dir`.
    pub fn start_in(dir: &Path, args: &[&str]) -> Server {
        Self::start_configured(dir, args, |_| {})
    }

    /// Like [`Server::start_in`], with `configure` applied to the command before it starts
    /// (resource limits, environment).
    pub fn start_configured(
        dir: &Path,
        args: &[&str],
        configure: impl FnOnce(&mut Command),
    ) -> Server {
        let mut command = Command::new(env!("CARGO_BIN_EXE_steerdns"));
        command
            .current_dir(dir)
            .arg("serve")
            .args(args)
            .env("STEERDNS_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if !args.contains(&"--listen") {
            command.args(["--listen", "127.0.0.1:0"]);
        }
        if !args.contains(&"--admin-listen") {
            command.args(["--admin-listen", "127.0.0.1:0"]);
        }
        configure(&mut command);
        let mut child = command.spawn().expect("start steerdns");
        let rx = lines_of(child.stdout.take().expect("stdout"));
        let mut addr = None;
        let mut admin = None;
        let mut startup = Vec::new();
        loop {
            let line = match rx.recv_timeout(TIMEOUT * 2) {
                Ok(line) => line,
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("steerdns did not become ready; stdout so far: {startup:#?}");
                }
            };
            startup.push(line.clone());
            if let Some(rest) = line.strip_prefix("listening on ") {
                let a = rest.split_whitespace().next().expect("address");
                addr.get_or_insert(a.parse::<SocketAddr>().expect("socket address"));
            }
            if let Some(rest) = line.strip_prefix("admin on http://") {
                admin = rest.trim().parse::<SocketAddr>().ok();
            }
            if line.starts_with("ready") {
                break;
            }
        }
        Server {
            child,
            addr: addr.expect("a listen address"),
            admin,
            stdout_lines: rx,
            startup,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Sends raw bytes over UDP and returns the raw reply, or None if none came in time.
    pub fn udp_raw(&self, packet: &[u8], wait: Duration) -> Option<Vec<u8>> {
        udp_once(self.addr, packet, wait)
    }

    /// A query over UDP, parsed.
    pub fn udp(&self, query: &Message) -> Message {
        let bytes = query.to_vec().expect("encode");
        let raw = self.udp_raw(&bytes, TIMEOUT).expect("udp answer");
        Message::from_vec(&raw).expect("well-formed answer")
    }

    /// A query over a fresh TCP connection, parsed.
    pub fn tcp(&self, query: &Message) -> Message {
        let mut stream = self.connect_tcp();
        let bytes = query.to_vec().expect("encode");
        write_frame(&mut stream, &bytes);
        Message::from_vec(&read_frame(&mut stream).expect("tcp answer")).expect("well-formed")
    }

    pub fn connect_tcp(&self) -> TcpStream {
        let stream = TcpStream::connect_timeout(&self.addr, TIMEOUT).expect("connect");
        stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
        stream
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `packets` (encoded queries, ids set) over `socket` to `server` and collects the
/// replies: what is still unanswered is sent again, `attempts` times at most, each time waiting
/// up to `attempt_wait` for the replies; `slot` says which packet a reply answers (None: not
/// one of these). One reply or None per packet.
pub fn exchange_with_retries(
    socket: &UdpSocket,
    server: SocketAddr,
    packets: &[Vec<u8>],
    attempts: usize,
    attempt_wait: Duration,
    mut slot: impl FnMut(&Message) -> Option<usize>,
) -> Vec<Option<Message>> {
    let mut replies: Vec<Option<Message>> = vec![None; packets.len()];
    let mut buf = vec![0u8; 65535];
    for _ in 0..attempts {
        let missing: Vec<&Vec<u8>> = packets
            .iter()
            .zip(&replies)
            .filter(|(_, reply)| reply.is_none())
            .map(|(packet, _)| packet)
            .collect();
        if missing.is_empty() {
            break;
        }
        for bytes in &missing {
            socket.send_to(bytes, server).expect("send");
        }
        let mut outstanding = missing.len();
        let deadline = Instant::now() + attempt_wait;
        while outstanding > 0 && Instant::now() < deadline {
            let Ok((n, _)) = socket.recv_from(&mut buf) else {
                continue;
            };
            let Ok(message) = Message::from_vec(&buf[..n]) else {
                panic!("malformed response: {:?}", &buf[..n]);
            };
            if let Some(i) = slot(&message) {
                if replies[i].is_none() {
                    replies[i] = Some(message);
                    outstanding -= 1;
                }
            }
        }
    }
    replies
}

pub fn write_frame(stream: &mut TcpStream, bytes: &[u8]) {
    let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(bytes);
    stream.write_all(&framed).expect("write");
}

pub fn read_frame(stream: &mut TcpStream) -> Option<Vec<u8>> {
    let mut len = [0u8; 2];
    stream.read_exact(&mut len).ok()?;
    let mut buf = vec![0u8; u16::from_be_bytes(len) as usize];
    stream.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// Sends `packet` once over UDP from a fresh loopback socket (no retries) and returns the raw
/// reply, or None if none came within `wait`.
pub fn udp_once(server: SocketAddr, packet: &[u8], wait: Duration) -> Option<Vec<u8>> {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
    socket.set_read_timeout(Some(wait)).expect("timeout");
    socket.send_to(packet, server).expect("send");
    let mut buf = vec![0u8; 65535];
    let (n, _) = socket.recv_from(&mut buf).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// Polls `probe` every 20 ms until it returns `Some`, at most `limit`; fails naming `what`.
pub fn wait_for<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(value) = probe() {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The lines `pipe` gives (e.g. a child's stdout), read by a thread of their own until the pipe
/// closes or the receiver is dropped.
pub fn lines_of(pipe: impl Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

pub fn a_records(response: &Message) -> Vec<std::net::Ipv4Addr> {
    response
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

/// Runs `steerdns check` with `args` in `dir`; returns its exit status and all it printed
/// (stdout, then stderr).
pub fn steerdns_check(dir: &Path, args: &[&std::ffi::OsStr]) -> (std::process::ExitStatus, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .current_dir(dir)
        .arg("check")
        .args(args)
        .env("STEERDNS_LOG", "warn")
        .output()
        .expect("run steerdns check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status, text)
}

/// A plain query (RD clear, no EDNS).
pub fn query(name: &str, rtype: RecordType) -> Message {
    let mut message = Message::query();
    message.metadata.id = rand_id();
    message.metadata.recursion_desired = false;
    let mut q = Query::query(Name::from_ascii(name).expect("name"), rtype);
    q.set_query_class(DNSClass::IN);
    message.add_query(q);
    message
}

/// Parses "a.b.c.d/len" or "v6::/len".
pub fn subnet(text: &str) -> (IpAddr, u8) {
    let (addr, len) = text.split_once('/').expect("address/prefix");
    (
        addr.parse().expect("subnet address"),
        len.parse().expect("subnet prefix"),
    )
}

/// A query with EDNS(0) and an ECS option for `subnet` ("81.2.69.0/24"; host bits must be 0).
pub fn ecs_query(name: &str, rtype: RecordType, subnet_text: &str) -> Message {
    let (addr, prefix) = subnet(subnet_text);
    ecs_query_addr(name, rtype, addr, prefix)
}

/// A query with EDNS(0) and an ECS option for `addr`/`prefix`.
pub fn ecs_query_addr(name: &str, rtype: RecordType, addr: IpAddr, prefix: u8) -> Message {
    let mut message = query(name, rtype);
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    edns.options_mut()
        .insert(EdnsOption::Subnet(ClientSubnet::new(addr, prefix, 0)));
    message.set_edns(edns);
    message
}

/// A port free for UDP and TCP on 127.0.0.1 when asked, for a server that must be given an
/// explicit port (unbound; a second server binding the port of the first). Another process
/// may take it before it is bound: callers bind it at once.
pub fn free_port() -> u16 {
    for _ in 0..50 {
        let udp = UdpSocket::bind("127.0.0.1:0").expect("bind udp");
        let port = udp.local_addr().expect("addr").port();
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no port free for both UDP and TCP");
}

/// A named pipe at `path` (nobody writes it: reading it would block).
pub fn mkfifo(path: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("no NUL in path");
    // SAFETY: mkfifo only creates a file at a path we own.
    let made = unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) };
    assert_eq!(made, 0, "mkfifo: {}", std::io::Error::last_os_error());
}

/// A query with EDNS(0) advertising `payload`.
pub fn query_edns(name: &str, rtype: RecordType, payload: u16) -> Message {
    let mut message = query(name, rtype);
    let mut edns = Edns::new();
    edns.set_max_payload(payload);
    message.set_edns(edns);
    message
}

fn rand_id() -> u16 {
    use std::sync::atomic::{AtomicU16, Ordering};
    static NEXT: AtomicU16 = AtomicU16::new(4242);
    NEXT.fetch_add(7919, Ordering::Relaxed)
}

/// Runs `dig` with these arguments against the server; fails the test if dig is missing.
pub fn dig(server: &Server, args: &[&str]) -> String {
    let output = Command::new("dig")
        .arg("@127.0.0.1")
        .arg("-p")
        .arg(server.port().to_string())
        .args(["+time=3", "+tries=1"])
        .args(args)
        .output()
        .expect("dig must be installed (apt-get install bind9-dnsutils); .ci/run installs it");
    assert!(output.status.success(), "dig {args:?} failed: {:?}", output);
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A directory under the system temp dir, removed on drop (permissions a test took away from
/// the files directly in it are given back first, so removal works for non-root users too).
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("steerdns-{label}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        TempDir(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(entries) = std::fs::read_dir(&self.0) {
            for entry in entries.flatten() {
                let mode = if entry.path().is_dir() { 0o755 } else { 0o644 };
                let _ =
                    std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(mode));
            }
        }
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A config file in a scratch directory (removed on drop): `[server]` with the bundled zones,
/// then `rest` (more `[server]` keys first, then any sections).
pub struct TempConfig(TempDir);

impl TempConfig {
    pub fn new(label: &str, rest: &str) -> TempConfig {
        let dir = TempDir::new(label);
        let zones = repo_path("zones");
        let zones = zones.to_str().expect("utf-8 repo path");
        let text = format!("[server]\nzones = {zones:?}\n{rest}\n");
        std::fs::write(dir.path().join("steerdns.toml"), text).expect("write config");
        TempConfig(dir)
    }

    pub fn dir(&self) -> &Path {
        self.0.path()
    }

    /// Starts the server with this config and `extra` arguments.
    pub fn start_with(&self, extra: &[&str]) -> Server {
        let path = self.dir().join("steerdns.toml");
        let mut args = vec!["--config", path.to_str().expect("utf-8 temp path")];
        args.extend_from_slice(extra);
        Server::start(&args)
    }

    pub fn start(&self) -> Server {
        self.start_with(&[])
    }
}

/// Makes a self-signed leaf certificate (ECDSA P-256, for "ns1.example.net" and 127.0.0.1) valid
/// for `days` days with `openssl`, as `dir/NAME.pem` and `dir/NAME.key`; fails the test if
/// openssl is missing.
pub fn self_signed_cert(dir: &Path, name: &str, days: u32) -> (PathBuf, PathBuf) {
    let cert = dir.join(format!("{name}.pem"));
    let key = dir.join(format!("{name}.key"));
    let output = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-subj", "/CN=ns1.example.net"])
        .args(["-addext", "subjectAltName=DNS:ns1.example.net,IP:127.0.0.1"])
        // A leaf, not a CA (openssl's default for -x509): clients that verify against it as
        // their trust anchor (webpki) refuse a CA certificate used as the server's.
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-days")
        .arg(days.to_string())
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl must be installed (apt-get install openssl); .ci/run installs it");
    assert!(output.status.success(), "openssl req failed: {output:?}");
    (cert, key)
}

/// The base64 SHA-256 of a certificate's SubjectPublicKeyInfo (what `kdig +tls-pin=` takes).
pub fn spki_pin(cert: &Path) -> String {
    let script = format!(
        "openssl x509 -in '{}' -pubkey -noout | openssl pkey -pubin -outform der \
         | openssl dgst -sha256 -binary | base64",
        cert.display()
    );
    let output = Command::new("sh")
        .args(["-c", &script])
        .output()
        .expect("run openssl");
    assert!(
        output.status.success(),
        "pin of {}: {output:?}",
        cert.display()
    );
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Runs `kdig @addr -p port ARGS` (time-outs short, one try); returns (success, stdout). Fails
/// the test if kdig is missing.
pub fn kdig(server: SocketAddr, args: &[&str]) -> (bool, String) {
    let output = Command::new("kdig")
        .arg(format!("@{}", server.ip()))
        .arg("-p")
        .arg(server.port().to_string())
        .args(["+time=5", "+retry=0"])
        .args(args)
        .output()
        .expect("kdig must be installed (apt-get install knot-dnsutils); .ci/run installs it");
    let ok = output.status.success();
    (ok, String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The text of the TXT answers of `response` (a CH TXT trace), character strings joined.
pub fn trace_text(response: &Message) -> String {
    response
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::TXT(txt) => Some(
                txt.txt_data
                    .iter()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .collect::<String>(),
            ),
            _ => None,
        })
        .collect()
}
