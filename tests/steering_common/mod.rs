//! Helpers for the steering tests: temporary copies of the bundled example config with their
//! own control file (and extra config), ECS queries, a pipelined UDP exchanger, and readers for
//! the parts of an answer steering decides (addresses, CNAME targets, ECS scope).
//!
//! Everything talks to the real binary on loopback through `common::Server`; every wait is
//! bounded.

#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hickory_proto::op::{Edns, Message, ResponseCode};
use hickory_proto::rr::rdata::opt::{EdnsCode, EdnsOption};
use hickory_proto::rr::{Name, RData, RecordType};

// Not every test that includes this module asks with ECS.
#[allow(unused_imports)]
pub use crate::common::{a_records, ecs_query, ecs_query_addr, subnet};
use crate::common::{exchange_with_retries, query, repo_path, Server, TempDir};

/// The regions of the bundled example, in topology order, with their regional anycast index
/// (`198.51.100.N`, `2001:db8:1::N`).
pub const REGIONS: [(&str, u8); 8] = [
    ("na-east", 1),
    ("na-west", 2),
    ("sa-east", 3),
    ("eu-west", 4),
    ("eu-north", 5),
    ("af-south", 6),
    ("ap-east", 7),
    ("ap-south", 8),
];

/// The bundled example's global anycast answer.
pub const GLOBAL_V4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 1);
pub const GLOBAL_V6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);

/// Network the temporary configs pin to `na-west` (no country of the example maps there).
pub const NA_WEST_OVERRIDE: &str = "198.18.0.0/15";

/// `[[geo.overrides]]` text pinning [`NA_WEST_OVERRIDE`] to na-west.
pub fn na_west_override() -> String {
    geo_override(NA_WEST_OVERRIDE, "na-west")
}

/// One `[[geo.overrides]]` entry as config text.
pub fn geo_override(network: &str, region: &str) -> String {
    format!("\n[[geo.overrides]]\nnetwork = \"{network}\"\nregion = \"{region}\"\n")
}

pub fn regional_v4(n: u8) -> Ipv4Addr {
    Ipv4Addr::new(198, 51, 100, n)
}

pub fn regional_v6(n: u8) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 1, 0, 0, 0, 0, u16::from(n))
}

/// Control-file text forcing every region of the example to `answer`.
pub fn force_all(answer: &str) -> String {
    REGIONS
        .iter()
        .map(|(region, _)| format!("[regions.{region}]\nforce = \"{answer}\"\n"))
        .collect()
}

/// A copy of the bundled `steerdns.toml` in a temp dir, with absolute paths for the zones and
/// the geo database, its own `control.toml`, and `extra` config text appended.
pub struct Setup {
    pub dir: TempDir,
    pub config: PathBuf,
}

impl Setup {
    /// The example with the bundled database.
    pub fn new(extra: &str, control: &str) -> Setup {
        Setup::with_database(&repo_path("geoip/example.mmdb"), extra, control)
    }

    pub fn with_database(database: &Path, extra: &str, control: &str) -> Setup {
        let original = std::fs::read_to_string(repo_path("steerdns.toml")).expect("steerdns.toml");
        let zones = repo_path("zones");
        let text = replace_once(
            &original,
            "zones = \"zones\"",
            &format!("zones = {:?}", zones.display().to_string()),
        );
        let text = replace_once(
            &text,
            "database = \"geoip/example.mmdb\"",
            &format!("database = {:?}", database.display().to_string()),
        );
        // The control file stays relative, so it resolves against the temp dir.
        assert!(
            text.contains("file = \"control.toml\""),
            "steerdns.toml should name control.toml"
        );
        let dir = TempDir::new("steering");
        let config = dir.path().join("steerdns.toml");
        std::fs::write(&config, format!("{text}\n{extra}\n")).expect("write config");
        let setup = Setup { dir, config };
        setup.write_control(control);
        setup
    }

    /// Replaces the control file (the server reads it at start).
    pub fn write_control(&self, control: &str) {
        // An empty control file is refused by the server; a comment line plus a harmless
        // setting keeps "no knobs" expressible.
        let text = if control.trim().is_empty() {
            "shield = \"auto\"\n".to_string()
        } else {
            control.to_string()
        };
        std::fs::write(self.dir.path().join("control.toml"), text).expect("write control");
    }

    /// Starts the server on this config (127.0.0.1:0 unless `args` has `--listen`).
    pub fn start(&self, args: &[&str]) -> Server {
        let config = self.config.display().to_string();
        let mut all = vec!["--config", config.as_str()];
        all.extend_from_slice(args);
        start_server(&all)
    }
}

/// The bundled example as shipped (`./steerdns.toml`, its control file and database).
pub fn example_server() -> Server {
    start_server(&[])
}

/// `Server::start` with the admin endpoint on a free port, so that servers of tests running
/// in parallel do not fight over the default admin port.
fn start_server(args: &[&str]) -> Server {
    let mut all = args.to_vec();
    if !all.contains(&"--admin-listen") {
        all.extend_from_slice(&["--admin-listen", "127.0.0.1:0"]);
    }
    Server::start(&all)
}

fn replace_once(text: &str, from: &str, to: &str) -> String {
    assert_eq!(
        text.matches(from).count(),
        1,
        "steerdns.toml should contain `{from}` exactly once"
    );
    text.replacen(from, to, 1)
}

/// A query with EDNS(0) and no ECS.
pub fn edns_query(name: &str, rtype: RecordType) -> Message {
    let mut message = query(name, rtype);
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    message.set_edns(edns);
    message
}

/// The ECS option of a response: (source prefix, scope prefix, address).
pub fn ecs_of(response: &Message) -> Option<(u8, u8, IpAddr)> {
    match response.edns.as_ref()?.option(EdnsCode::Subnet)? {
        EdnsOption::Subnet(cs) => Some((cs.source_prefix(), cs.scope_prefix(), cs.addr())),
        _ => None,
    }
}

/// The ECS scope of a response; fails the test when the option was not echoed.
pub fn scope(response: &Message) -> u8 {
    ecs_of(response)
        .unwrap_or_else(|| panic!("no ECS option echoed in {response:?}"))
        .1
}

pub fn aaaa_records(response: &Message) -> Vec<Ipv6Addr> {
    response
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::AAAA(a) => Some(a.0),
            _ => None,
        })
        .collect()
}

/// CNAME records of the answer section as (owner, target), in order.
pub fn cnames(response: &Message) -> Vec<(String, String)> {
    response
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::CNAME(c) => Some((r.name.to_ascii(), c.0.to_ascii())),
            _ => None,
        })
        .collect()
}

/// The first CNAME target of the answer, if any.
pub fn first_cname(response: &Message) -> Option<String> {
    cnames(response)
        .into_iter()
        .next()
        .map(|(_, target)| target)
}

/// The types of the answer section, in order.
pub fn answer_types(response: &Message) -> Vec<RecordType> {
    response.answers.iter().map(|r| r.record_type()).collect()
}

pub fn assert_noerror(response: &Message, what: &str) {
    assert_eq!(
        response.metadata.response_code,
        ResponseCode::NoError,
        "{what}: {response:?}"
    );
}

/// Sends many queries over one UDP socket, a bounded number in flight, and returns the
/// responses in query order. Lost datagrams are retried a few times; a query that never gets
/// an answer fails the test.
pub struct Exchanger {
    socket: UdpSocket,
    server: SocketAddr,
    window: usize,
}

/// Per-receive timeout; the whole exchange is bounded by attempts × window rounds of this.
const RECV_TIMEOUT: Duration = Duration::from_secs(2);
const ATTEMPTS: usize = 3;

impl Exchanger {
    pub fn new(server: &Server) -> Exchanger {
        Exchanger::to(server.addr)
    }

    pub fn to(server: SocketAddr) -> Exchanger {
        let local: SocketAddr = match server {
            SocketAddr::V4(_) => "127.0.0.1:0".parse().expect("v4 loopback"),
            SocketAddr::V6(_) => "[::1]:0".parse().expect("v6 loopback"),
        };
        let socket = UdpSocket::bind(local).expect("bind client socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("read timeout");
        Exchanger {
            socket,
            server,
            window: 32,
        }
    }

    pub fn one(&self, query: &Message) -> Message {
        self.all(std::slice::from_ref(query))
            .pop()
            .expect("one response")
    }

    /// Raw bytes in, raw bytes out (for packets hickory will not build).
    pub fn raw(&self, packet: &[u8]) -> Vec<u8> {
        let id = u16::from_be_bytes([packet[0], packet[1]]);
        for _ in 0..ATTEMPTS {
            self.socket.send_to(packet, self.server).expect("send");
            let deadline = Instant::now() + RECV_TIMEOUT;
            let mut buf = vec![0u8; 65535];
            while Instant::now() < deadline {
                if let Ok((n, _)) = self.socket.recv_from(&mut buf) {
                    if n >= 2 && u16::from_be_bytes([buf[0], buf[1]]) == id {
                        buf.truncate(n);
                        return buf;
                    }
                }
            }
        }
        panic!("no answer to a raw query");
    }

    pub fn all(&self, queries: &[Message]) -> Vec<Message> {
        let mut responses: Vec<Option<Message>> = Vec::with_capacity(queries.len());
        for (chunk_index, chunk) in queries.chunks(self.window).enumerate() {
            let base = chunk_index * self.window;
            // Ids are the global index (mod 2^16), so a late reply to an earlier chunk cannot
            // be taken for a reply in this one.
            let id = |i: usize| ((base + i) % 65536) as u16;
            let packets: Vec<Vec<u8>> = chunk
                .iter()
                .enumerate()
                .map(|(i, q)| {
                    let mut q = q.clone();
                    q.metadata.id = id(i);
                    q.to_vec().expect("encode query")
                })
                .collect();
            let by_id: HashMap<u16, usize> = (0..chunk.len()).map(|i| (id(i), i)).collect();
            let name = |m: &Message| m.queries.first().map(|q| q.name().clone());
            responses.extend(exchange_with_retries(
                &self.socket,
                self.server,
                &packets,
                ATTEMPTS,
                RECV_TIMEOUT,
                |message| {
                    by_id
                        .get(&message.metadata.id)
                        .copied()
                        .filter(|&i| name(message) == name(&chunk[i]))
                },
            ));
            // Stop at the first chunk that stays unanswered: waiting out every later chunk
            // against a dead server would only delay the failure.
            if let Some(i) = (base..base + chunk.len()).find(|&i| responses[i].is_none()) {
                panic!(
                    "no answer to query #{i} after {ATTEMPTS} tries: {:?}",
                    queries[i]
                );
            }
        }
        responses
            .into_iter()
            .enumerate()
            .map(|(i, r)| r.unwrap_or_else(|| panic!("no answer to query #{i}")))
            .collect()
    }
}

/// A DNS name for hickory from text.
pub fn name(text: &str) -> Name {
    Name::from_ascii(text).expect("name")
}
