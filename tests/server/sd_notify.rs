//! `Type=notify`: the server tells systemd it is ready only once it serves.

use crate::common;

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::time::Duration;

#[test]
fn ready_is_sent_to_notify_socket_after_the_first_snapshot_serves() {
    let dir = std::env::temp_dir().join(format!("steerdns-notify-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("notify.sock");
    let socket = UnixDatagram::bind(&path).expect("bind notify socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut child = Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .current_dir(common::repo_path(""))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .env("NOTIFY_SOCKET", &path)
        .env("STEERDNS_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start steerdns");
    let mut buf = [0u8; 256];
    let received = socket.recv(&mut buf);
    // By the time READY=1 arrives, the server has printed its listen address: it answers.
    let stdout = child.stdout.take().expect("stdout");
    let mut addr = None;
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        if let Some(rest) = line.strip_prefix("listening on ") {
            addr = rest.split_whitespace().next().map(str::to_string);
        }
        if line == "ready" {
            break;
        }
    }
    let answered = addr.and_then(|a| {
        let client = std::net::UdpSocket::bind("127.0.0.1:0").ok()?;
        client.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        let query = [
            0x12, 0x34, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 7, b'e', b'x', b'a', b'm', b'p', b'l', b'e',
            3, b'c', b'o', b'm', 0, 0, 6, 0, 1,
        ];
        client.send_to(&query, a.as_str()).ok()?;
        let mut reply = [0u8; 512];
        client.recv(&mut reply).ok()
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&dir);
    let n = received.expect("no READY=1 within 10 s");
    let message = String::from_utf8_lossy(&buf[..n]);
    assert!(message.lines().any(|l| l == "READY=1"), "{message:?}");
    assert!(
        answered.is_some(),
        "ready was sent but the server did not answer"
    );
}
