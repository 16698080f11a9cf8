//! Sanity probes: a configured question ("critical.example.com A") answered by a snapshot
//! through the one answer path ([`crate::answer::respond`]), as a client on loopback
//! would get it over UDP. A staged rollout compares the answers before and after a change.
//! Off the serving path (run after a swap); the probe is counted like any query.

use std::net::{IpAddr, Ipv4Addr};

use super::respond;
use crate::dns::wire::{Requester, Transport, MAX_MESSAGE};

use crate::snapshot::Snapshot;

/// What one probe got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeAnswer {
    /// NOERROR with at least one answer record.
    pub ok: bool,
    /// `NOERROR, 2 answers`, `NOERROR, no data`, `SERVFAIL`, `no answer`, ...
    pub detail: String,
}

/// The numeric code of a record type name a probe may use.
pub fn type_code(rtype: &str) -> Option<u16> {
    Some(match rtype.to_ascii_uppercase().as_str() {
        "A" => 1,
        "NS" => 2,
        "CNAME" => 5,
        "SOA" => 6,
        "PTR" => 12,
        "MX" => 15,
        "TXT" => 16,
        "AAAA" => 28,
        "SRV" => 33,
        "DS" => 43,
        "DNSKEY" => 48,
        "SVCB" => 64,
        "HTTPS" => 65,
        "CAA" => 257,
        _ => return None,
    })
}

/// Asks `snapshot` for `name` / `rtype`.
pub fn probe(snapshot: &Snapshot, name: &str, rtype: &str) -> ProbeAnswer {
    let bad = |detail: &str| ProbeAnswer {
        ok: false,
        detail: detail.to_string(),
    };
    let Some(code) = type_code(rtype) else {
        return bad("unknown record type");
    };
    let Some(packet) = query(name, code) else {
        return bad("not a valid name");
    };
    let client = Requester::new(IpAddr::V4(Ipv4Addr::LOCALHOST), Transport::Udp);
    let mut out = vec![0u8; MAX_MESSAGE];
    let Some(len) = respond(snapshot, &packet, &client, &mut out) else {
        return bad("no answer");
    };
    if len < 12 {
        return bad("short answer");
    }
    let rcode = out[3] & 0x0f;
    let answers = u16::from_be_bytes([out[6], out[7]]);
    let rcode_name = match rcode {
        0 => "NOERROR",
        1 => "FORMERR",
        2 => "SERVFAIL",
        3 => "NXDOMAIN",
        4 => "NOTIMP",
        5 => "REFUSED",
        _ => "other rcode",
    };
    ProbeAnswer {
        ok: rcode == 0 && answers > 0,
        detail: match (rcode, answers) {
            (0, 0) => "NOERROR, no data".to_string(),
            (0, 1) => "NOERROR, 1 answer".to_string(),
            (0, n) => format!("NOERROR, {n} answers"),
            _ => rcode_name.to_string(),
        },
    }
}

/// A query packet (no RD, no EDNS) for `name` / `code`; `None` if the name cannot be one.
fn query(name: &str, code: u16) -> Option<Vec<u8>> {
    let mut packet = vec![0x50, 0x52, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    let trimmed = name.strip_suffix('.').unwrap_or(name);
    if !trimmed.is_empty() {
        for label in trimmed.split('.') {
            if label.is_empty() || label.len() > 63 {
                return None;
            }
            packet.push(label.len() as u8);
            packet.extend_from_slice(label.as_bytes());
        }
    }
    packet.push(0);
    if packet.len() - 12 > 255 {
        return None;
    }
    packet.extend_from_slice(&code.to_be_bytes());
    packet.extend_from_slice(&1u16.to_be_bytes());
    Some(packet)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_packets() {
        let packet = query("a.example.", 28).expect("packet");
        assert_eq!(&packet[12..], b"\x01a\x07example\x00\x00\x1c\x00\x01");
        assert_eq!(query("a.example", 1), query("a.example.", 1));
        assert_eq!(query("a..example", 1), None);
        assert_eq!(query(&"x".repeat(64), 1), None);
        assert_eq!(type_code("aaaa"), Some(28));
        assert_eq!(type_code("BOGUS"), None);
    }

    #[test]
    fn the_empty_snapshot_refuses_everything() {
        let answer = probe(&Snapshot::empty(), "critical.example.com", "A");
        assert!(!answer.ok);
        assert_eq!(answer.detail, "REFUSED");
        assert_eq!(
            probe(&Snapshot::empty(), "x.", "BOGUS").detail,
            "unknown record type"
        );
    }
}
