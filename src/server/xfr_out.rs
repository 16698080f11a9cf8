//! Outgoing zone transfers over TCP and DoT (AXFR RFC 5936, IXFR RFC 1995, XoT RFC 9103):
//! from a transfer request read on a connection to the messages written back.
//!
//! Owns the order of the checks -- a zone apex served, the TSIG ([`crate::dns::tsig`]), the
//! zone's ACL ([`super::xfr_acl`]), the limits (transfers at once, per client per minute) --
//! and the answer: REFUSED with the reason counted, NOTAUTH for a failed signature (or a name
//! that is no zone apex), else the records of [`crate::zone::transfer`] or
//! [`crate::zone::ixfr`] packed into messages, every one signed when the request was (RFC
//! 8945 5.3.1). The work runs on a blocking thread holding an `Arc` of the snapshot it
//! started with; the serving path only asks [`is_transfer`]. Status and counts go to
//! [`crate::metrics::transfer`].

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::xfr_acl::{Decision, Signature, TransferAcl};
use crate::config::transfer::TransferConfig;
use crate::dns::tsig::{self, Signer, Verdict};
use crate::dns::wire::{flag, parse_query, rcode, rtype, Query, Requester, HEADER_LEN};
use crate::metrics::transfer::transfer_status;
use crate::snapshot::transfer::TransferSetup;
use crate::snapshot::Snapshot;
use crate::zone::ixfr::{client_serial, ixfr_records};
use crate::zone::model::Zone;
use crate::zone::transfer::{axfr_records, pack_messages, MAX_TRANSFER_MESSAGE};

/// The messages answering one transfer request, and the transfer slot held while they are
/// written (given back when this is dropped).
#[derive(Default)]
pub struct Outgoing {
    pub messages: Vec<Vec<u8>>,
    _slot: Option<Slot>,
}

impl Outgoing {
    fn one(message: Vec<u8>) -> Outgoing {
        Outgoing {
            messages: vec![message],
            _slot: None,
        }
    }
}

/// Whether `packet` is for this module (`[transfer]` is set): an AXFR or IXFR request, or a
/// TSIG-signed query (a secondary's SOA check, answered signed). Everything else, transfers
/// without `[transfer]` included, goes to `respond`.
pub fn is_transfer(snapshot: &Snapshot, packet: &[u8]) -> bool {
    snapshot.transfer().is_some()
        && parse_query(packet).is_ok_and(|q| {
            matches!(q.qtype, rtype::AXFR | rtype::IXFR) || !matches!(tsig::find(packet), Ok(None))
        })
}

/// Answers a request that [`is_transfer`] accepted from `client`, on a blocking thread.
pub async fn answer(snapshot: Arc<Snapshot>, packet: Vec<u8>, client: Requester) -> Outgoing {
    tokio::task::spawn_blocking(move || answer_now(&snapshot, &packet, client, unix_now()))
        .await
        .unwrap_or_default()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The answer to a transfer request at `now` (seconds since the epoch).
pub fn answer_now(snapshot: &Snapshot, packet: &[u8], requester: Requester, now: u64) -> Outgoing {
    let client = requester.addr;
    let Ok(query) = parse_query(packet) else {
        return Outgoing::default();
    };
    if !matches!(query.qtype, rtype::AXFR | rtype::IXFR) {
        return signed_query(snapshot, packet, &query, requester, now);
    }
    let kind = if query.qtype == rtype::AXFR {
        "axfr"
    } else {
        "ixfr"
    };
    let status = transfer_status();
    let who = client.to_string();
    let Some(setup) = snapshot.transfer() else {
        return Outgoing::one(error_message(&query, packet, rcode::REFUSED));
    };
    let zone = match snapshot.zones().find(&query.qname) {
        Some((zone, 0)) if query.qclass == crate::dns::wire::class::IN => zone,
        _ => {
            status.refused("-", &who, kind, "not_zone");
            return Outgoing::one(error_message(&query, packet, NOTAUTH));
        }
    };
    let name = zone_name(zone);
    let verdict = match tsig::verify_request(packet, &setup.keys, now) {
        Ok(verdict) => verdict,
        Err(tsig::Malformed) => {
            status.refused(&name, &who, kind, "malformed");
            return Outgoing::one(error_message(&query, packet, rcode::FORMERR));
        }
    };
    let (signature, mut signer) = match &verdict {
        Verdict::Unsigned => (Signature::Unsigned, None),
        Verdict::Signed { key, request_mac } => {
            let key = &setup.keys[*key];
            let signer = Signer::for_answer_of(key, request_mac);
            (Signature::SignedWith(key.name.as_str()), Some(signer))
        }
        Verdict::Refused(refusal) => {
            let reason = match refusal.error {
                tsig::error::BADKEY => "tsig_badkey",
                tsig::error::BADTIME => "tsig_badtime",
                _ => "tsig_badsig",
            };
            status.refused(&name, &who, kind, reason);
            let mut message = error_message(&query, packet, NOTAUTH);
            tsig::error_answer(&mut message, refusal, &setup.keys, now);
            return Outgoing::one(message);
        }
    };
    let refuse = |signer: &mut Option<Signer<'_>>, reason: &'static str| {
        status.refused(&name, &who, kind, reason);
        let mut message = error_message(&query, packet, rcode::REFUSED);
        if let Some(signer) = signer {
            signer.sign(&mut message, now);
        }
        Outgoing::one(message)
    };
    if let Decision::Refuse(reason) = acl(setup, &name).decide(client, signature) {
        return refuse(&mut signer, reason.as_str());
    }
    let slot = match limits().take(client, &setup.config, Instant::now()) {
        Ok(slot) => slot,
        Err(reason) => return refuse(&mut signer, reason),
    };
    let view = snapshot.transfer_view(zone);
    let (label, records) = if query.qtype == rtype::AXFR {
        ("axfr", axfr_records(view))
    } else {
        match client_serial(packet) {
            Some(serial) => match ixfr_records(view, snapshot.journal().zone(&zone.apex), serial) {
                Some((kind, records)) => (kind.as_str(), Some(records)),
                None => ("ixfr", None),
            },
            // No SOA in the request: the whole zone, as BIND and Knot answer it.
            None => ("ixfr_full", axfr_records(view)),
        }
    };
    let question = query.question_bytes(packet);
    let packed = records.and_then(|r| pack_messages(query.id, question, &r, MAX_TRANSFER_MESSAGE));
    let Some(mut messages) = packed else {
        return refuse(&mut signer, "unpackable");
    };
    if let Some(signer) = &mut signer {
        for message in &mut messages {
            signer.sign(message, now);
        }
    }
    status.sent(&name, &who, label, zone.serial);
    tracing::info!(
        "transfer out: {name} ({label}, serial {}) to {who}, {} message(s)",
        zone.serial,
        messages.len()
    );
    Outgoing {
        messages,
        _slot: Some(slot),
    }
}

/// A TSIG-signed query that is no transfer: answered as the serving path answers it, signed
/// with the request's key; NOTAUTH when the signature fails.
fn signed_query(
    snapshot: &Snapshot,
    packet: &[u8],
    query: &Query,
    requester: Requester,
    now: u64,
) -> Outgoing {
    let Some(setup) = snapshot.transfer() else {
        return Outgoing::default();
    };
    match tsig::verify_request(packet, &setup.keys, now) {
        Ok(Verdict::Signed { key, request_mac }) => {
            let mut out = vec![0u8; crate::dns::wire::MAX_MESSAGE];
            let Some(len) = crate::answer::respond(snapshot, packet, &requester, &mut out) else {
                return Outgoing::default();
            };
            out.truncate(len);
            Signer::for_answer_of(&setup.keys[key], &request_mac).sign(&mut out, now);
            Outgoing::one(out)
        }
        Ok(Verdict::Refused(refusal)) => {
            let mut message = error_message(query, packet, NOTAUTH);
            tsig::error_answer(&mut message, &refusal, &setup.keys, now);
            Outgoing::one(message)
        }
        Ok(Verdict::Unsigned) | Err(tsig::Malformed) => {
            Outgoing::one(error_message(query, packet, rcode::FORMERR))
        }
    }
}

/// The rcode of an answer for a zone this server is not authoritative for (RFC 5936 2.2.1),
/// and of one whose TSIG failed (RFC 8945 5.2).
const NOTAUTH: u16 = tsig::NOTAUTH;

/// The zone's name in presentation form without the final dot (`example.com`).
pub fn zone_name(zone: &Zone) -> String {
    let text = zone.origin.to_ascii();
    let name = text.trim_end_matches('.');
    if name.is_empty() {
        ".".to_string()
    } else {
        name.to_ascii_lowercase()
    }
}

/// The zone's transfer rules: its own fields, the `[transfer]` default for those unset.
fn acl(setup: &TransferSetup, zone: &str) -> TransferAcl {
    let defaults = &setup.config;
    let own = setup.zone(zone);
    let keys = own
        .and_then(|z| z.keys.clone())
        .or_else(|| defaults.keys.clone())
        .unwrap_or_else(|| setup.keys.iter().map(|k| k.name.clone()).collect());
    TransferAcl {
        allow: own
            .and_then(|z| z.allow.clone())
            .unwrap_or_else(|| defaults.allow.clone()),
        keys,
        allow_unsigned: own
            .and_then(|z| z.allow_unsigned)
            .unwrap_or(defaults.allow_unsigned),
    }
}

/// A header and the question of `query`, with `rcode` (opcode and RD copied).
fn error_message(query: &Query, packet: &[u8], code: u16) -> Vec<u8> {
    let mut message = Vec::with_capacity(HEADER_LEN + 300);
    message.extend_from_slice(&query.id.to_be_bytes());
    let flags = flag::QR | (query.flags & (0x7800 | flag::RD)) | (code & 0xf);
    message.extend_from_slice(&flags.to_be_bytes());
    message.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    message.extend_from_slice(query.question_bytes(packet));
    message
}

/// Transfers running and started per client: what [`Limits::take`] checks.
#[derive(Default)]
struct Limits {
    running: Arc<AtomicUsize>,
    /// Per client: the start of its current minute and the transfers started in it.
    clients: Mutex<HashMap<IpAddr, (Instant, u32)>>,
}

/// A running transfer; given back when dropped.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

const MINUTE: Duration = Duration::from_secs(60);
/// Clients remembered at most (the oldest minutes are forgotten first).
const MAX_CLIENTS: usize = 4096;

fn limits() -> &'static Limits {
    static LIMITS: OnceLock<Limits> = OnceLock::new();
    LIMITS.get_or_init(Limits::default)
}

impl Limits {
    /// A slot for a transfer to `client`, or the reason there is none (`rate`, `busy`).
    fn take(
        &self,
        client: IpAddr,
        config: &TransferConfig,
        now: Instant,
    ) -> Result<Slot, &'static str> {
        let Ok(mut clients) = self.clients.lock() else {
            return Err("busy");
        };
        if clients.len() >= MAX_CLIENTS {
            clients.retain(|_, (start, _)| now.duration_since(*start) < MINUTE);
        }
        if clients.len() >= MAX_CLIENTS {
            return Err("busy");
        }
        let entry = clients.entry(client).or_insert((now, 0));
        if now.duration_since(entry.0) >= MINUTE {
            *entry = (now, 0);
        }
        if entry.1 >= config.per_client_per_minute {
            return Err("rate");
        }
        if self.running.fetch_add(1, Ordering::AcqRel) >= config.max_concurrent {
            self.running.fetch_sub(1, Ordering::AcqRel);
            return Err("busy");
        }
        entry.1 += 1;
        Ok(Slot(self.running.clone()))
    }
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Message, Query as HQuery, ResponseCode};
    use hickory_proto::rr::{Name, RecordType};

    use super::*;
    use crate::dns::tsig::{Algorithm, Key};
    use crate::dns::wire::Transport;
    use crate::snapshot::{Compiled, ServeOptions};

    const ZONE: &str = "$TTL 300\n@ SOA ns1 hostmaster 7 3600 600 86400 300\n@ NS ns1\n\
                        ns1 A 192.0.2.1\nwww A 192.0.2.2\n";
    const NOW: u64 = 1_800_000_000;

    fn key() -> Key {
        Key::new("xfr-key", Algorithm::HmacSha256, b"0123456789abcdef0123").expect("key")
    }

    fn snapshot() -> Snapshot {
        let zone = crate::zone::model::example_zone(ZONE);
        let setup = TransferSetup {
            config: TransferConfig::default(),
            keys: vec![key()],
        };
        let compiled = Compiled::build(vec![zone], ServeOptions::default()).with_transfer(setup);
        Snapshot::standalone(compiled)
    }

    fn request(name: &str, rtype: RecordType) -> Vec<u8> {
        let mut message = Message::query();
        message.metadata.id = 77;
        message.add_query(HQuery::query(Name::from_ascii(name).expect("name"), rtype));
        message.to_vec().expect("encode")
    }

    fn from(addr: &str) -> Requester {
        Requester::new(addr.parse().expect("ip"), Transport::Tcp)
    }

    fn rcode_of(out: &Outgoing) -> ResponseCode {
        assert_eq!(out.messages.len(), 1);
        Message::from_vec(&out.messages[0])
            .expect("valid")
            .metadata
            .response_code
    }

    #[test]
    fn loopback_unsigned_gets_the_zone_others_need_the_key() {
        let snapshot = snapshot();
        let axfr = request("example.com.", RecordType::AXFR);
        let out = answer_now(&snapshot, &axfr, from("127.0.0.1"), NOW);
        let parsed = Message::from_vec(&out.messages[0]).expect("valid");
        assert_eq!(parsed.answers.len(), 5); // SOA, NS, two A, SOA

        let out = answer_now(&snapshot, &axfr, from("192.0.2.9"), NOW);
        assert_eq!(rcode_of(&out), ResponseCode::Refused);

        let mut signed = axfr.clone();
        let mac = tsig::sign_request(&mut signed, &key(), NOW);
        let out = answer_now(&snapshot, &signed, from("192.0.2.9"), NOW);
        let mut check = Signer::for_answer_of(&snapshot.transfer().expect("on").keys[0], &mac);
        for message in &out.messages {
            check.verify(message, NOW).expect("every message signed");
        }

        let wrong =
            Key::new("xfr-key", Algorithm::HmacSha256, b"another-secret-0123").expect("key");
        let mut badsig = axfr.clone();
        tsig::sign_request(&mut badsig, &wrong, NOW);
        let out = answer_now(&snapshot, &badsig, from("192.0.2.9"), NOW);
        assert_eq!(u16::from(rcode_of(&out)), NOTAUTH);
    }

    #[test]
    fn a_name_below_the_apex_is_notauth_and_a_current_ixfr_one_soa() {
        let snapshot = snapshot();
        let below = request("www.example.com.", RecordType::AXFR);
        let out = answer_now(&snapshot, &below, from("127.0.0.1"), NOW);
        assert_eq!(u16::from(rcode_of(&out)), NOTAUTH);

        // IXFR with the serial we serve (7) in the authority section.
        let mut ixfr = request("example.com.", RecordType::IXFR);
        ixfr[9] = 1; // NSCOUNT
        ixfr.extend_from_slice(&[0xC0, 12, 0, 6, 0, 1, 0, 0, 0, 0, 0, 24, 0xC0, 12, 0xC0, 12]);
        for field in [7u32, 0, 0, 0, 0] {
            ixfr.extend_from_slice(&field.to_be_bytes());
        }
        let out = answer_now(&snapshot, &ixfr, from("127.0.0.1"), NOW);
        let parsed = Message::from_vec(&out.messages[0]).expect("valid");
        assert_eq!(parsed.answers.len(), 1);
        assert_eq!(parsed.answers[0].record_type(), RecordType::SOA);
    }

    #[test]
    fn limits_refuse_past_the_rate_and_the_concurrency() {
        let limits = Limits::default();
        let config = TransferConfig {
            max_concurrent: 2,
            per_client_per_minute: 3,
            ..TransferConfig::default()
        };
        let t0 = Instant::now();
        let a: IpAddr = "192.0.2.1".parse().expect("ip");
        let b: IpAddr = "192.0.2.2".parse().expect("ip");
        let first = limits.take(a, &config, t0).expect("first");
        let second = limits.take(a, &config, t0).expect("second");
        assert_eq!(limits.take(b, &config, t0).err(), Some("busy"));
        drop(first);
        let third = limits.take(a, &config, t0).expect("third");
        drop((second, third));
        assert_eq!(limits.take(a, &config, t0).err(), Some("rate"));
        assert!(limits.take(b, &config, t0).is_ok());
        assert!(limits.take(a, &config, t0 + MINUTE).is_ok());
    }
}
