//! NOTIFY out (RFC 1996): tells each zone's configured secondaries (`[transfer.zone."<name>"]
//! notify`) that the zone changed, so they transfer it without waiting for their refresh
//! timer.
//!
//! Owns one thread (run by the daemon's supervisor) that watches the snapshot in service:
//! whenever a zone's serial differs from the one last seen (and once at start), a NOTIFY with
//! the zone's SOA goes to every target over UDP, TSIG-signed when the target names a key,
//! resent with doubling waits until the target answers or the retries run out; a newer serial
//! replaces a NOTIFY not yet answered. Answers are matched by ID and address, their TSIG
//! checked, and counted in [`crate::metrics::transfer`]. Never touches the serving path.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::config::transfer::NotifyTarget;
use crate::dns::tsig::{self, Signer};
use crate::dns::wire::rtype;
use crate::metrics::transfer::transfer_status;
use crate::snapshot::{SharedSnapshot, Snapshot};

use super::xfr_out::zone_name;

/// How often the snapshot is looked at and answers collected.
const TICK: Duration = Duration::from_millis(50);
/// The longest wait between two sends to one target.
const MAX_WAIT: Duration = Duration::from_secs(60);
/// The NOTIFY opcode.
const OPCODE_NOTIFY: u16 = 4;

/// The thread body: watches `snapshot` until `sleep` says to stop.
pub fn run(snapshot: SharedSnapshot) -> impl FnOnce(&dyn Fn(Duration) -> bool) + Send {
    move |sleep| {
        let mut notifier = Notifier::default();
        loop {
            if sleep(TICK) {
                return;
            }
            let current = snapshot.load_full();
            notifier.tick(&current, Instant::now(), unix_now());
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// One NOTIFY waiting for its answer.
struct Pending {
    zone: String,
    target: NotifyTarget,
    serial: u32,
    /// The message as sent, unsigned (signed afresh each time: TSIG time).
    message: Vec<u8>,
    id: u16,
    sent: u32,
    next_at: Instant,
    /// The MAC of the signed request last sent (to check the answer's TSIG).
    mac: Option<Vec<u8>>,
}

#[derive(Default)]
struct Notifier {
    /// Zone → the serial NOTIFYs were last started for.
    seen: HashMap<String, u32>,
    pending: Vec<Pending>,
    v4: Option<UdpSocket>,
    v6: Option<UdpSocket>,
}

impl Notifier {
    fn tick(&mut self, snapshot: &Snapshot, now: Instant, unix: u64) {
        let Some(setup) = snapshot.transfer() else {
            return;
        };
        for zone in snapshot.zones().zones() {
            let name = zone_name(zone);
            let Some(targets) = setup.zone(&name).map(|z| &z.notify) else {
                continue;
            };
            if targets.is_empty() || self.seen.get(&name) == Some(&zone.serial) {
                continue;
            }
            self.seen.insert(name.clone(), zone.serial);
            self.pending.retain(|p| p.zone != name);
            let Some(soa) = zone.soa().and_then(|s| s.records().next()) else {
                continue;
            };
            for target in targets {
                let id = random_id();
                self.pending.push(Pending {
                    zone: name.clone(),
                    target: target.clone(),
                    serial: zone.serial,
                    message: notify_message(id, &zone.apex, soa),
                    id,
                    sent: 0,
                    next_at: now,
                    mac: None,
                });
            }
        }
        let retries = setup.config.notify_retries;
        let first_wait = Duration::from_millis(setup.config.notify_timeout_ms);
        let status = transfer_status();
        let mut i = 0;
        while i < self.pending.len() {
            let p = &mut self.pending[i];
            if p.next_at > now {
                i += 1;
                continue;
            }
            if p.sent > retries {
                let target = p.target.addr.to_string();
                status.notify_done(&p.zone, &target, p.serial, Err("timeout"));
                tracing::warn!(
                    "NOTIFY {} serial {} to {target}: no answer",
                    p.zone,
                    p.serial
                );
                self.pending.swap_remove(i);
                continue;
            }
            let mut message = p.message.clone();
            let key = p.target.key.as_deref().and_then(|k| setup.key(k));
            p.mac = key.map(|key| tsig::sign_request(&mut message, key, unix));
            let socket = match p.target.addr {
                SocketAddr::V4(_) => socket(&mut self.v4, "0.0.0.0:0"),
                SocketAddr::V6(_) => socket(&mut self.v6, "[::]:0"),
            };
            if let Some(socket) = socket {
                if let Err(e) = socket.send_to(&message, p.target.addr) {
                    tracing::debug!("NOTIFY {} to {}: {e}", p.zone, p.target.addr);
                }
            }
            status.notify_sent(&p.zone, &p.target.addr.to_string(), p.serial);
            let wait = first_wait.saturating_mul(1 << p.sent.min(16)).min(MAX_WAIT);
            p.sent += 1;
            p.next_at = now + wait;
            i += 1;
        }
        let mut buf = [0u8; 4096];
        let mut answers = Vec::new();
        for socket in [&self.v4, &self.v6].into_iter().flatten() {
            while let Ok((len, from)) = socket.recv_from(&mut buf) {
                answers.push((buf[..len].to_vec(), from));
            }
        }
        for (answer, from) in answers {
            self.answered(setup, &answer, from, unix);
        }
    }

    /// A datagram from `from`: the answer to a pending NOTIFY, or ignored.
    fn answered(
        &mut self,
        setup: &crate::snapshot::transfer::TransferSetup,
        answer: &[u8],
        from: SocketAddr,
        unix: u64,
    ) {
        let Some(header) = answer.get(..12) else {
            return;
        };
        let id = u16::from_be_bytes([header[0], header[1]]);
        let flags = u16::from_be_bytes([header[2], header[3]]);
        if flags & 0x8000 == 0 || (flags >> 11) & 0xf != OPCODE_NOTIFY {
            return;
        }
        let Some(index) = self
            .pending
            .iter()
            .position(|p| p.id == id && same_target(p.target.addr, from))
        else {
            return;
        };
        let p = self.pending.swap_remove(index);
        let target = p.target.addr.to_string();
        let key = p.target.key.as_deref().and_then(|k| setup.key(k));
        let result = match (flags & 0xf, key, &p.mac) {
            (0, Some(key), Some(mac)) => Signer::for_answer_of(key, mac)
                .verify(answer, unix)
                .map_err(|_| "bad_tsig"),
            (0, _, _) => Ok(()),
            (5, _, _) => Err("refused"),
            (9, _, _) => Err("notauth"),
            _ => Err("error"),
        };
        match result {
            Ok(()) => tracing::info!(
                "NOTIFY {} serial {} acknowledged by {target}",
                p.zone,
                p.serial
            ),
            Err(why) => tracing::warn!("NOTIFY {} serial {} to {target}: {why}", p.zone, p.serial),
        }
        transfer_status().notify_done(&p.zone, &target, p.serial, result);
    }
}

/// Whether an answer from `from` comes from `target` (an IPv4 target may answer from its
/// mapped address on a dual-stack socket).
fn same_target(target: SocketAddr, from: SocketAddr) -> bool {
    target.port() == from.port() && target.ip().to_canonical() == from.ip().to_canonical()
}

/// The socket of one address family, opened (non-blocking) on first use.
fn socket<'s>(slot: &'s mut Option<UdpSocket>, bind: &str) -> Option<&'s UdpSocket> {
    if slot.is_none() {
        match UdpSocket::bind(bind).and_then(|s| s.set_nonblocking(true).map(|()| s)) {
            Ok(socket) => *slot = Some(socket),
            Err(e) => tracing::warn!("NOTIFY socket on {bind}: {e}"),
        }
    }
    slot.as_ref()
}

/// A NOTIFY for the zone at `apex` with its SOA record (type..rdata) in the answer section.
fn notify_message(id: u16, apex: &[u8], soa: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(12 + 2 * apex.len() + soa.len() + 4);
    m.extend_from_slice(&id.to_be_bytes());
    m.extend_from_slice(&((OPCODE_NOTIFY << 11) | 0x0400).to_be_bytes()); // NOTIFY, AA
    m.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 0]);
    m.extend_from_slice(apex);
    m.extend_from_slice(&rtype::SOA.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    m.extend_from_slice(apex);
    m.extend_from_slice(soa);
    m
}

fn random_id() -> u16 {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; 2];
    let _ = ring::rand::SystemRandom::new().fill(&mut bytes);
    u16::from_be_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use hickory_proto::op::{Message, OpCode};
    use hickory_proto::rr::RecordType;

    use super::*;

    use crate::config::transfer::{TransferConfig, TransferZoneConfig};
    use crate::metrics::transfer::transfer_status;
    use crate::snapshot::transfer::TransferSetup;
    use crate::snapshot::{Compiled, ServeOptions};

    fn snapshot(target: SocketAddr) -> Snapshot {
        let zone = crate::zone::model::example_zone(
            "$TTL 300\n@ SOA ns1 hostmaster 7 3600 600 86400 300\n@ NS ns1\nns1 A 192.0.2.1\n",
        );
        let mut config = TransferConfig {
            notify_retries: 2,
            notify_timeout_ms: 10,
            ..TransferConfig::default()
        };
        let notify = vec![NotifyTarget {
            addr: target,
            key: None,
        }];
        let rules = TransferZoneConfig {
            notify,
            ..TransferZoneConfig::default()
        };
        config.zone.insert("example.com".into(), rules);
        let setup = TransferSetup {
            config,
            keys: Vec::new(),
        };
        let compiled = Compiled::build(vec![zone], ServeOptions::default()).with_transfer(setup);
        Snapshot::standalone(compiled)
    }

    fn target() -> (UdpSocket, SocketAddr) {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let addr = socket.local_addr().expect("addr");
        (socket, addr)
    }

    fn acked(target: SocketAddr) -> Option<u32> {
        let zones = transfer_status().report().zones;
        zones
            .get("example.com")?
            .notify
            .get(&target.to_string())?
            .acked_serial
    }

    #[test]
    fn an_answered_notify_is_acknowledged_once() {
        let (socket, addr) = target();
        let snapshot = snapshot(addr);
        let mut notifier = Notifier::default();
        let t0 = Instant::now();
        notifier.tick(&snapshot, t0, 0);
        let mut buf = [0u8; 512];
        let (len, from) = socket.recv_from(&mut buf).expect("a NOTIFY");
        let parsed = Message::from_vec(&buf[..len]).expect("valid");
        assert_eq!(parsed.op_code, OpCode::Notify);
        let mut answer = buf[..12].to_vec();
        answer[2] |= 0x80; // QR
        answer[4..12].copy_from_slice(&[0; 8]);
        socket.send_to(&answer, from).expect("answer");
        for _ in 0..100 {
            notifier.tick(&snapshot, t0, 0);
            if notifier.pending.is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(notifier.pending.is_empty());
        assert_eq!(acked(addr), Some(7));
        // The same serial again: nothing more is sent.
        notifier.tick(&snapshot, t0 + Duration::from_secs(1), 0);
        assert!(notifier.pending.is_empty());
    }

    #[test]
    fn a_silent_target_gets_the_retries_with_doubling_waits_then_is_given_up() {
        let (socket, addr) = target();
        let snapshot = snapshot(addr);
        let mut notifier = Notifier::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Sent at 0, 10 ms and 30 ms (waits of 10 and 20 ms); not before they are due.
        for (at, sends) in [(0, 1), (5, 1), (10, 2), (29, 2), (30, 3)] {
            notifier.tick(&snapshot, t0 + ms(at), 0);
            assert_eq!(notifier.pending[0].sent, sends, "at {at} ms");
        }
        notifier.tick(&snapshot, t0 + ms(70), 0);
        assert!(notifier.pending.is_empty(), "given up after the retries");
        let mut buf = [0u8; 512];
        let received = (0..4)
            .filter(|_| socket.recv_from(&mut buf).is_ok())
            .count();
        assert_eq!(received, 3);
        assert_eq!(acked(addr), None);
    }

    #[test]
    fn a_notify_carries_the_question_and_the_soa() {
        let apex = b"\x07example\x03com\x00";
        let mut soa = vec![0, 6, 0, 1, 0, 0, 1, 44, 0, 22, 0, 0];
        soa.extend_from_slice(&[0; 20]);
        let message = notify_message(7, apex, &soa);
        let parsed = Message::from_vec(&message).expect("valid");
        assert_eq!(parsed.op_code, OpCode::Notify);
        assert!(parsed.authoritative);
        assert_eq!(parsed.queries[0].query_type(), RecordType::SOA);
        assert_eq!(parsed.answers[0].record_type(), RecordType::SOA);
    }
}
