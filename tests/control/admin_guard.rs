//! The admin endpoint against a browser and a leaked or rotated token (issue 12, items 1–3),
//! over real sockets against the real server:
//! - a foreign `Host` (DNS rebinding) is refused, for reads and writes alike;
//! - a write whose `Origin`/`Referer` names another site is refused, even with the token;
//! - a write is authorized before its body is read;
//! - no token ships: a missing token file is created (random, 0600) and the CLI reads it;
//!   short or world-readable tokens are refused;
//! - replacing the token file rotates the token on SIGHUP and on `steerdns reload`, and every
//!   write sees the file as it is now (replaced, or its mode changed and changed back).

use crate::control_common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use control_common::*;

/// A request with `extra` header lines (each ending in \r\n) and no body.
fn request(addr: SocketAddr, method: &str, path: &str, host: &str, extra: &str) -> (u16, String) {
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: 0\r\n\
         {extra}\r\n"
    );
    send_http(addr, head.as_bytes()).unwrap_or_else(|e| panic!("{method} {path}: {e}"))
}

fn bearer(token: &str) -> String {
    format!("Authorization: Bearer {token}\r\n")
}

#[test]
fn a_foreign_host_or_origin_is_refused() {
    let setup = Setup::new("guard-host");
    let server = setup.start();
    let admin = server.admin;
    let own = admin.to_string();
    let token = bearer(TOKEN);
    // The server's own address, other loopback literals and localhost work.
    for host in [own.as_str(), "127.0.0.1", "localhost:5380", "[::1]:5380"] {
        let (code, body) = request(admin, "GET", "/v1/status", host, "");
        assert_eq!(code, 200, "Host {host}: {body}");
    }
    // A name that a hostile page rebound to 127.0.0.1: refused for reads and writes.
    for host in [
        "evil.example",
        "evil.example:5380",
        "127.0.0.1.evil.example",
    ] {
        for (method, path) in [("GET", "/v1/status"), ("GET", "/metrics"), ("GET", "/")] {
            let (code, body) = request(admin, method, path, host, "");
            assert_eq!(code, 403, "{method} {path} with Host {host}: {body}");
        }
        let (code, body) = request(admin, "POST", "/v1/reload", host, &token);
        assert_eq!(code, 403, "POST with Host {host} and the token: {body}");
        assert!(body.contains("allowed_hosts"), "{body}");
    }
    // A write from another site's page (a form post carries Origin, or at least Referer).
    let accepted = server.accepted();
    for header in [
        "Origin: http://evil.example\r\n",
        "Origin: null\r\n",
        "Referer: http://evil.example/attack.html\r\n",
        "Origin: http://127.0.0.1@evil.example\r\n",
    ] {
        let (code, body) = request(
            admin,
            "POST",
            "/v1/reload",
            &own,
            &format!("{token}{header}"),
        );
        assert_eq!(code, 403, "{header:?}: {body}");
    }
    assert_eq!(server.accepted(), accepted, "a refused write reloaded");
    // The dashboard's own origin may write (with the token).
    let origin = format!("Origin: http://{own}\r\nReferer: http://{own}/\r\n");
    let (code, body) = request(
        admin,
        "POST",
        "/v1/reload",
        &own,
        &format!("{token}{origin}"),
    );
    assert_eq!(code, 200, "{body}");
}

/// Sends a POST head announcing a large body, sends no body, and returns the status code of
/// the reply that comes before any body byte was sent (None: no reply within 3 s).
fn post_without_body(addr: SocketAddr, path: &str, token: Option<&str>) -> Option<u16> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(3)))
        .expect("timeout");
    let auth = token.map(bearer).unwrap_or_default();
    let head =
        format!("POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 900000\r\n{auth}\r\n");
    stream.write_all(head.as_bytes()).expect("write head");
    let mut reply = Vec::new();
    let mut buf = [0u8; 1024];
    while !reply.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&reply)
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
}

#[test]
fn writes_are_authorized_before_the_body_is_read() {
    let setup = Setup::new("guard-body");
    let server = setup.start();
    for path in ["/v1/reload", "/v1/load"] {
        assert_eq!(
            post_without_body(server.admin, path, None),
            Some(401),
            "{path}"
        );
        assert_eq!(
            post_without_body(server.admin, path, Some("wrong-token-0123456789abcdef0123")),
            Some(401),
            "{path}"
        );
    }
}

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).expect("stat").permissions().mode() & 0o777
}

#[test]
fn a_missing_token_file_is_created_private_and_the_cli_uses_it() {
    let setup = Setup::new("guard-create");
    let path = setup.path("admin.token");
    std::fs::remove_file(&path).expect("remove the test token");
    let server = setup.start();
    let created = std::fs::read_to_string(&path).expect("the server created the token file");
    let created = created.trim();
    assert_eq!(created.len(), 64, "{created:?}");
    assert!(
        created.chars().all(|c| c.is_ascii_hexdigit()),
        "{created:?}"
    );
    assert_eq!(mode(&path), 0o600);
    assert!(
        server.log_shows(&path.display().to_string(), Duration::from_secs(5)),
        "the log should say where the token is: {}",
        server.log()
    );
    assert!(
        !server.log().contains(created),
        "the token itself must not be logged"
    );
    ok(
        &server.cli(&["reload"]),
        "steerdns reload with the created token",
    );
    let (code, body) = http(server.admin, "POST", "/v1/reload", Some(created));
    assert_eq!(code, 200, "{body}");
    // A second server does not replace it.
    drop(server);
    let again = setup.start();
    assert_eq!(
        std::fs::read_to_string(&path).expect("token").trim(),
        created
    );
    drop(again);
}

#[test]
fn short_or_world_readable_tokens_are_refused() {
    for (label, token, mode) in [
        ("short", "only-20-characters!!", 0o600),
        ("world", TOKEN, 0o644),
    ] {
        let setup = Setup::new(&format!("guard-{label}"));
        let path = setup.path("admin.token");
        std::fs::write(&path, format!("{token}\n")).expect("write token");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        let server = setup.start();
        let (code, body) = http(server.admin, "POST", "/v1/reload", Some(token));
        assert_eq!(code, 403, "{label}: {body}");
        assert!(
            body.contains(&path.display().to_string()),
            "{label}: {body}"
        );
        let out = server.cli(&["reload"]);
        assert!(!out.status.success(), "{label}: CLI reload succeeded");
        // Fixed by the operator, the next SIGHUP enables writes.
        write_token(&path, TOKEN);
        server.sighup();
        wait_for_code(&server, TOKEN, 200);
    }
}

/// Polls `POST /v1/reload` with `token` until it answers `want` (at most 10 s).
fn wait_for_code(server: &Daemon, token: &str, want: u16) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = http(server.admin, "POST", "/v1/reload", Some(token));
        if code == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "still {code} ({body}), want {want}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn replacing_the_token_file_rotates_the_token() {
    let setup = Setup::new("guard-rotate");
    let path = setup.path("admin.token");
    let server = setup.start();
    let second = "second-token-0123456789abcdef0123456789";
    let third = "third-token-0123456789abcdef01234567890";
    // SIGHUP (systemctl reload): the new token works, the old one stops working.
    write_token(&setup.path("new.token"), second);
    std::fs::rename(setup.path("new.token"), &path).expect("replace token file");
    server.sighup();
    wait_for_code(&server, TOKEN, 401);
    let (code, body) = http(server.admin, "POST", "/v1/reload", Some(second));
    assert_eq!(code, 200, "{body}");
    // `steerdns reload` right after replacing the file: the CLI reads the new token, and the
    // server takes it without a SIGHUP first.
    write_token(&setup.path("new.token"), third);
    std::fs::rename(setup.path("new.token"), &path).expect("replace token file");
    ok(
        &server.cli(&["reload"]),
        "steerdns reload after replacing the token",
    );
    let (code, body) = http(server.admin, "POST", "/v1/reload", Some(second));
    assert_eq!(code, 401, "the replaced token still works: {body}");
    let (code, body) = http(server.admin, "POST", "/v1/load", Some(second));
    assert_eq!(code, 401, "{body}");
}

#[test]
fn every_write_sees_the_token_file_as_it_is_now() {
    let setup = Setup::new("guard-identity");
    let path = setup.path("admin.token");
    let server = setup.start();
    let second = "second-token-0123456789abcdef0123456789";
    write_token(&setup.path("new.token"), second);
    std::fs::rename(setup.path("new.token"), &path).expect("replace token file");
    // No SIGHUP, no reload in between: the old token is refused at the next write.
    let (code, body) = http(server.admin, "POST", "/v1/load", Some(TOKEN));
    assert_eq!(code, 401, "the replaced token still works: {body}");
    let (code, body) = http(server.admin, "POST", "/v1/reload", Some(second));
    assert_eq!(code, 200, "{body}");
    // World-readable: refused at the next write; private again: accepted at the next write,
    // without a SIGHUP and without a stale refusal.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let (code, body) = http(server.admin, "POST", "/v1/reload", Some(second));
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("0644"), "{body}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (code, body) = http(server.admin, "POST", "/v1/reload", Some(second));
    assert_eq!(code, 200, "{body}");
}
