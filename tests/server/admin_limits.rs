//! The admin endpoint's limits, over real sockets:
//!
//! - oversized request bodies are refused with 413 (issue 8), before the body is read without
//!   the token (issue 12: authorize first); the endpoint keeps serving afterwards;
//! - a request head that does not complete within `[admin] header_timeout_ms`, and a connection
//!   that sends nothing within `idle_timeout_secs`, are closed and counted (issue 28: 200
//!   partial-header connections stayed open for 65 s);
//! - `max_connections` bounds the connections held: a newcomer takes the place of the one that
//!   has waited longest for a request, so a fresh client is answered during a flood;
//! - with the server limited to 256 descriptors, a flood of the admin endpoint leaves DNS over
//!   TCP answering, and a flood of DNS over TCP leaves the admin endpoint answering (issue 28:
//!   21,000 idle admin connections used up every descriptor; DNS accepts failed with EMFILE and
//!   `steerdns reload` timed out): a reload is accepted during either flood.

use crate::common;
use crate::hostile_common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use common::{query, wait_for, TempConfig, TIMEOUT};
use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType;
use hostile_common::*;

const OVERSIZED: usize = 2 << 20;

const TOKEN: &str = "admin-limits-token-0123456789abcdef";

/// A config whose `[admin]` section is `admin` plus a token file holding [`TOKEN`] (0600).
fn config_with_token(label: &str, admin: &str) -> TempConfig {
    let config = TempConfig::new(
        label,
        &format!("[admin]\ntoken_file = \"admin.token\"\n{admin}"),
    );
    write_token(&config);
    config
}

/// Writes [`TOKEN`] to `admin.token` beside the config, mode 0600.
fn write_token(config: &TempConfig) {
    use std::os::unix::fs::PermissionsExt;
    let token_file = config.dir().join("admin.token");
    std::fs::write(&token_file, TOKEN).expect("write token");
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// `POST /v1/reload` with the token: it answers 200 when the reload is accepted.
fn reload(admin: SocketAddr) -> (u16, String) {
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    http_with(admin, "POST", "/v1/reload", &auth, b"{}".to_vec())
}

#[test]
fn oversized_bodies_are_refused_with_413() {
    let config = config_with_token("admin-limits", "");
    let (_server, admin) = start_with_admin(&config, &[]);
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    for path in ["/v1/load", "/v1/reload"] {
        let (code, text) = http_with(admin, "POST", path, &auth, vec![b' '; OVERSIZED]);
        assert_eq!(code, 413, "POST {path} with 2 MiB: {text}");
        let (code, text) = http(admin, "POST", path, vec![b' '; OVERSIZED]);
        assert_eq!(code, 401, "POST {path} with 2 MiB and no token: {text}");
    }
    // A small body is not refused for its size.
    let (code, text) = reload(admin);
    assert_eq!(code, 200, "{text}");
    let (code, _) = http(admin, "GET", "/v1/status", Vec::new());
    assert_eq!(code, 200, "still serving after refusing");
}

fn connect(addr: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect");
    stream.set_read_timeout(Some(TIMEOUT)).expect("timeout");
    stream
}

/// A connection that sends the start of a request head and never finishes it.
fn partial_head(admin: SocketAddr) -> TcpStream {
    let mut stream = connect(admin);
    stream
        .write_all(b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .expect("write a partial head");
    stream
}

fn closed_counter(admin: SocketAddr, reason: &str) -> f64 {
    metric(
        admin,
        "steerdns_admin_connections_closed_total",
        &[("reason", reason)],
    )
}

#[test]
fn slow_heads_and_silent_connections_are_closed_by_their_timeouts() {
    let config = TempConfig::new(
        "admin-timeouts",
        "[admin]\nheader_timeout_ms = 300\nidle_timeout_secs = 1\n",
    );
    let (_server, admin) = start_with_admin(&config, &[]);
    let mut partial: Vec<TcpStream> = (0..20).map(|_| partial_head(admin)).collect();
    let mut silent: Vec<TcpStream> = (0..5).map(|_| connect(admin)).collect();
    // A head trickled in a byte every 50 ms is never idle, and still closed: the head as a
    // whole is late. Bounded: gives up after 200 bytes (10 s).
    let trickler = {
        let mut stream = connect(admin);
        std::thread::spawn(move || {
            for byte in b"GET /v1/status HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                .iter()
                .cycle()
                .take(200)
            {
                if stream.write_all(&[*byte]).is_err() {
                    return true;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            false
        })
    };
    for (i, stream) in partial.iter_mut().enumerate() {
        assert!(
            closed_within(stream, TIMEOUT),
            "partial head {i} still open"
        );
    }
    for (i, stream) in silent.iter_mut().enumerate() {
        assert!(
            closed_within(stream, TIMEOUT),
            "silent connection {i} still open"
        );
    }
    assert!(
        trickler.join().expect("trickler"),
        "a head trickled byte by byte was never cut off"
    );
    wait_for("the closes counted", TIMEOUT, || {
        (closed_counter(admin, "header_timeout") == 21.0
            && closed_counter(admin, "idle_timeout") == 5.0)
            .then_some(())
    });
    let (code, text) = http(admin, "GET", "/v1/status", Vec::new());
    assert_eq!(code, 200, "{text}");
    let status: serde_json::Value =
        serde_json::from_str(text.split_once("\r\n\r\n").map_or("", |(_, b)| b)).expect("json");
    assert_eq!(status["admin_connections"]["closed_header_timeout"], 21);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_steerdns"))
        .args(["status", "--admin", &admin.to_string()])
        .output()
        .expect("run steerdns status");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("closed 21 slow head(s), 5 idle"),
        "steerdns status:\n{text}"
    );
}

#[test]
fn a_full_table_gives_the_longest_waiting_place_to_a_newcomer() {
    let config = TempConfig::new(
        "admin-cap",
        "[admin]\nmax_connections = 8\nheader_timeout_ms = 60000\nidle_timeout_secs = 60\n",
    );
    let (_server, admin) = start_with_admin(&config, &[]);
    // The kernel hands connections to the server in the order they were made: `first` has
    // waited longest.
    let mut first = partial_head(admin);
    let holders: Vec<TcpStream> = (1..8).map(|_| partial_head(admin)).collect();
    // The table is full of partial heads; a fresh client is answered, in the first one's place.
    let (code, text) = http(admin, "GET", "/v1/status", Vec::new());
    assert_eq!(code, 200, "a fresh client during the flood: {text}");
    assert!(
        closed_within(&mut first, TIMEOUT),
        "the longest waiting was not evicted"
    );
    // A flood of 40 more never holds more than 8 places.
    let flood: Vec<TcpStream> = (0..40).map(|_| partial_head(admin)).collect();
    let evicted = wait_for("the flood evicts", TIMEOUT, || {
        let evicted = closed_counter(admin, "evicted");
        (evicted >= 40.0).then_some(evicted)
    });
    let open = metric(admin, "steerdns_admin_connections_open", &[]);
    assert!(
        open <= 8.0,
        "{open} admin connections open with max_connections = 8"
    );
    assert_eq!(metric(admin, "steerdns_admin_connections_max", &[]), 8.0);
    let (code, _) = http(admin, "GET", "/v1/status", Vec::new());
    assert_eq!(code, 200, "after {evicted} evictions");
    drop((holders, flood));
}

/// Descriptors the flooded servers below may have; the floods open far more connections.
const DESCRIPTOR_LIMIT: u64 = 256;
const FLOOD: usize = 400;

#[test]
fn a_flooded_admin_endpoint_leaves_descriptors_for_dns_over_tcp() {
    // max_connections far above what 256 descriptors allow: the admin endpoint's share is
    // bounded by the limit (an eighth), whatever the config says.
    let config = config_with_token(
        "admin-flood",
        "max_connections = 10000\ndescriptor_reserve = 32\nheader_timeout_ms = 60000\n\
         idle_timeout_secs = 60\n",
    );
    let (server, admin) = start_with_admin_and_descriptors(&config, &[], DESCRIPTOR_LIMIT);
    let flood: Vec<TcpStream> = (0..FLOOD).map(|_| connect(admin)).collect();
    wait_for("the flood accepted or evicted", TIMEOUT, || {
        let seen = metric(admin, "steerdns_admin_connections_total", &[]);
        (seen >= FLOOD as f64).then_some(())
    });
    for _ in 0..5 {
        let answer = server.tcp(&query("example.com.", RecordType::SOA));
        assert_eq!(answer.metadata.response_code, ResponseCode::NoError);
    }
    let (code, text) = http(admin, "GET", "/v1/status", Vec::new());
    assert_eq!(code, 200, "{text}");
    // A reload (it opens the config, zones, control file and GeoIP database) still works.
    let (code, text) = reload(admin);
    assert_eq!(code, 200, "reload during the flood: {text}");
    assert_eq!(
        metric(admin, "steerdns_descriptors_limit", &[]),
        DESCRIPTOR_LIMIT as f64
    );
    let open = metric(admin, "steerdns_admin_connections_open", &[]);
    assert!(
        open <= (DESCRIPTOR_LIMIT / 8) as f64,
        "{open} admin connections held"
    );
    assert!(closed_counter(admin, "evicted") > 0.0);
    drop(flood);
}

#[test]
fn a_flooded_dns_tcp_listener_leaves_descriptors_for_the_admin_endpoint() {
    let config = TempConfig::new(
        "dns-flood",
        "[server.tcp]\nmax_connections = 10000\nmax_connections_per_client = 10000\n\
         idle_timeout_secs = 60\n\
         [admin]\nmax_connections = 16\ndescriptor_reserve = 32\ntoken_file = \"admin.token\"\n",
    );
    write_token(&config);
    let (server, admin) = start_with_admin_and_descriptors(&config, &[], DESCRIPTOR_LIMIT);
    let flood: Vec<TcpStream> = (0..FLOOD).map(|_| server.connect_tcp()).collect();
    wait_for("DNS connections refused for descriptors", TIMEOUT, || {
        let refused = metric(
            admin,
            "steerdns_dns_connections_refused_descriptors_total",
            &[],
        );
        let accepted = metric(admin, "steerdns_tcp_connections_total", &[]);
        (refused + accepted >= FLOOD as f64 && refused > 0.0).then_some(())
    });
    // The admin endpoint still has its share: status, and several at once.
    let held: Vec<TcpStream> = (0..8).map(|_| partial_head(admin)).collect();
    let (code, text) = http(admin, "GET", "/v1/status", Vec::new());
    assert_eq!(code, 200, "{text}");
    let (code, text) = reload(admin);
    assert_eq!(code, 200, "reload during the flood: {text}");
    drop((held, flood));
}
