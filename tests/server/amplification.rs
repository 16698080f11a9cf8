//! No amplification by design (issue 8), measured over real UDP on loopback: a flood of the
//! queries a reflection attack would pick (ANY, TXT, the deliberately big TXT, a referral, the
//! apex) without EDNS and with EDNS advertising 4096, against the default server (1232-byte
//! EDNS payload) and one configured for 4096. Every response must fit the size the client may
//! take (512 without EDNS, the smaller of 4096 and the server's payload with it); a response
//! that does not fit is truncated (TC, no records) rather than oversize; ANY gets one RRset
//! (RFC 8482). The response/query byte ratios are printed; they are measurements, not
//! assertions.

use crate::common;
use crate::hostile_common;

use std::collections::BTreeSet;
use std::net::UdpSocket;
use std::time::Duration;

use common::*;
use hickory_proto::op::Message;
use hickory_proto::rr::RecordType;
use hostile_common::*;

/// Copies of each query in the flood, sent in batches of `BATCH` (then the replies read).
const COPIES: usize = 200;
const BATCH: usize = 50;

const QUERIES: [(&str, RecordType); 7] = [
    ("example.com.", RecordType::ANY),
    ("example.com.", RecordType::TXT),
    ("big.example.com.", RecordType::TXT),
    ("big.example.com.", RecordType::ANY),
    ("example.com.", RecordType::NS),
    ("sub.example.com.", RecordType::A),
    ("nope.example.com.", RecordType::TXT),
];

/// Bytes in and out for one kind of query.
#[derive(Default)]
struct Tally {
    queries: usize,
    query_bytes: usize,
    replies: usize,
    reply_bytes: usize,
    truncated: usize,
    largest: usize,
}

impl Tally {
    fn ratio(&self) -> f64 {
        self.reply_bytes as f64 / self.query_bytes.max(1) as f64
    }
}

/// Floods one query and checks every reply against `limit`.
fn flood(socket: &UdpSocket, server: std::net::SocketAddr, packet: &[u8], limit: usize) -> Tally {
    let mut tally = Tally::default();
    let mut buf = vec![0u8; 65535];
    for _ in 0..COPIES / BATCH {
        for _ in 0..BATCH {
            socket.send_to(packet, server).expect("send");
            tally.queries += 1;
            tally.query_bytes += packet.len();
        }
        for _ in 0..BATCH {
            let n = socket.recv(&mut buf).expect("every query is answered");
            check_reply(packet, &buf[..n], limit);
            tally.replies += 1;
            tally.reply_bytes += n;
            tally.largest = tally.largest.max(n);
            tally.truncated += usize::from(buf[2] & 0x02 != 0);
        }
    }
    tally
}

fn check_reply(packet: &[u8], reply: &[u8], limit: usize) {
    let query = Message::from_vec(packet).expect("our query parses");
    let message = Message::from_vec(reply).expect("a well-formed reply");
    let qtype = query.queries[0].query_type();
    assert!(
        reply.len() <= limit,
        "{qtype} reply of {} bytes exceeds the {limit} bytes the client may take",
        reply.len()
    );
    if message.metadata.truncation {
        assert!(
            message.answers.is_empty() && message.authorities.is_empty(),
            "a truncated reply carries no partial RRsets: {message:?}"
        );
    }
    if qtype == RecordType::ANY {
        let rrsets: BTreeSet<(String, RecordType)> = message
            .answers
            .iter()
            .map(|r| (r.name.to_ascii(), r.record_type()))
            .collect();
        assert!(
            rrsets.len() <= 1,
            "ANY answered with more than one RRset: {rrsets:?}"
        );
        assert!(
            message.metadata.truncation || !message.answers.is_empty(),
            "ANY on an existing name gets its one RRset (or TC)"
        );
    }
}

/// Floods every query with and without EDNS 4096; returns the overall ratios (no EDNS, EDNS).
fn measure(label: &str, server_payload: usize, rest: &str) -> (f64, f64) {
    let config = TempConfig::new("amplification", rest);
    let (server, _admin) = start_with_admin(&config, &[]);
    let socket = udp_from(alias(0, 0, 1));
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut totals = [Tally::default(), Tally::default()];
    println!("{label} (server EDNS payload {server_payload}):");
    for (name, rtype) in QUERIES {
        for (mode, edns) in [false, true].into_iter().enumerate() {
            let (message, limit) = if edns {
                (query_edns(name, rtype, 4096), server_payload.min(4096))
            } else {
                (query(name, rtype), 512)
            };
            let packet = message.to_vec().expect("encode");
            let tally = flood(&socket, server.addr, &packet, limit);
            if name == "big.example.com." && rtype == RecordType::TXT && !edns {
                assert_eq!(tally.truncated, tally.replies, "big TXT without EDNS is TC");
            }
            println!(
                "  {name:<18} {:<4} {:<9} query {:>3} B  reply max {:>4} B  TC {:>3}/{}  ratio {:.2}",
                rtype.to_string(),
                if edns { "EDNS4096" } else { "no EDNS" },
                packet.len(),
                tally.largest,
                tally.truncated,
                tally.replies,
                tally.ratio()
            );
            let total = &mut totals[mode];
            total.query_bytes += tally.query_bytes;
            total.reply_bytes += tally.reply_bytes;
            total.largest = total.largest.max(tally.largest);
        }
    }
    let ratios = (totals[0].ratio(), totals[1].ratio());
    println!(
        "  overall ratio: {:.2} without EDNS (largest {} B), {:.2} with EDNS 4096 (largest {} B)",
        ratios.0, totals[0].largest, ratios.1, totals[1].largest
    );
    ratios
}

#[test]
fn replies_fit_what_the_client_may_take_and_any_is_minimal() {
    let (plain, edns) = measure("default server", 1232, "");
    let (plain_4096, edns_4096) = measure("edns_payload = 4096", 4096, "edns_payload = 4096");
    // Without EDNS the server's payload setting makes no difference.
    assert!((plain - plain_4096).abs() < 1e-9, "{plain} vs {plain_4096}");
    assert!(
        edns_4096 >= edns,
        "a larger payload can only allow larger replies"
    );
}
