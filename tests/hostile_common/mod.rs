//! Helpers for the hostile-traffic tests (rate limiting, TCP limits, amplification, admin
//! limits): a config in a scratch directory, the server started with a known admin address,
//! sockets bound to loopback aliases (127.x.y.z needs no configuration on Linux), a small HTTP
//! client and a metrics reader.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use crate::common::{Server, TempConfig, TIMEOUT};

/// Starts the server with `config` and `extra` arguments, the admin endpoint on a port the
/// kernel picks (the server says which); returns it and that address.
pub fn start_with_admin(config: &TempConfig, extra: &[&str]) -> (Server, SocketAddr) {
    let mut args = vec!["--admin-listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    let server = config.start_with(&args);
    let admin = server.admin.expect("the server reports its admin address");
    (server, admin)
}

/// Like [`start_with_admin`], the server limited to `descriptors` open files (soft and hard
/// `RLIMIT_NOFILE`, set in the child before exec), so a flood reaches the limit quickly.
pub fn start_with_admin_and_descriptors(
    config: &TempConfig,
    extra: &[&str],
    descriptors: u64,
) -> (Server, SocketAddr) {
    use std::os::unix::process::CommandExt;
    let path = config.dir().join("steerdns.toml");
    let mut args = vec!["--config", path.to_str().expect("utf-8 temp path")];
    args.extend_from_slice(extra);
    let server = Server::start_configured(&crate::common::repo_path(""), &args, |command| {
        // SAFETY: between fork and exec only setrlimit runs, which is async-signal-safe and
        // touches only the struct it is given.
        unsafe {
            command.pre_exec(move || {
                let limit = libc::rlimit {
                    rlim_cur: descriptors as libc::rlim_t,
                    rlim_max: descriptors as libc::rlim_t,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    });
    let admin = server.admin.expect("the server reports its admin address");
    (server, admin)
}

pub fn alias(a: u8, b: u8, c: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, a, b, c))
}

/// A UDP socket with source address `ip`.
pub fn udp_from(ip: IpAddr) -> UdpSocket {
    let socket = UdpSocket::bind(SocketAddr::new(ip, 0)).expect("bind a loopback alias");
    socket.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    socket
}

/// A TCP connection to `server` with source address `ip`.
pub fn tcp_from(ip: IpAddr, server: SocketAddr) -> TcpStream {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("tcp socket");
    socket
        .bind(&SocketAddr::new(ip, 0).into())
        .expect("bind a loopback alias");
    socket
        .connect_timeout(&server.into(), TIMEOUT)
        .expect("connect");
    let stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    stream
}

/// Has the server closed this connection? Looks without waiting (open and quiet: `false`).
pub fn closed_now(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).expect("nonblocking");
    let mut byte = [0u8; 1];
    let closed = match stream.read(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
        Err(_) => true,
    };
    stream.set_nonblocking(false).expect("blocking");
    closed
}

/// Waits up to `limit` for the server to close the connection.
pub fn closed_within(stream: &mut TcpStream, limit: Duration) -> bool {
    stream.set_read_timeout(Some(limit)).expect("timeout");
    let mut buf = [0u8; 512];
    let closed = loop {
        match stream.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                break false
            }
            Err(_) => break true,
        }
    };
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    closed
}

/// One HTTP/1.1 request with `body`; returns (status code, response text). The body is written
/// from another thread, so a server that answers before reading it all does not deadlock us.
pub fn http(addr: SocketAddr, method: &str, path: &str, body: Vec<u8>) -> (u16, String) {
    http_with(addr, method, path, "", body)
}

/// Like [`http`], with `headers` (each line ending in `\r\n`) added to the head.
pub fn http_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &str,
    body: Vec<u8>,
) -> (u16, String) {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect to admin");
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n{headers}\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).expect("write head");
    let mut writer = stream.try_clone().expect("clone stream");
    let sender = std::thread::spawn(move || {
        // The server may close early (that is the point of a size limit): ignore errors.
        let _ = writer.write_all(&body);
    });
    let mut raw = Vec::new();
    let _ = stream.take(1 << 22).read_to_end(&mut raw);
    let _ = sender.join();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let code = text
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{method} {path}: no HTTP status in {text:?}"));
    (code, text)
}

/// The value of a counter or gauge in `GET /metrics` (summed over series whose labels include
/// `labels`); 0 when absent.
pub fn metric(admin: SocketAddr, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (code, text) = http(admin, "GET", "/metrics", Vec::new());
    assert_eq!(code, 200, "GET /metrics: {text}");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let scrape = prometheus_parse::Scrape::parse(body.lines().map(|l| Ok(l.to_string())))
        .expect("the exposition parses");
    scrape
        .samples
        .iter()
        .filter(|s| s.metric == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
            _ => 0.0,
        })
        .sum()
}
