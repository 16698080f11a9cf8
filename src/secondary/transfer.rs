//! One incoming transfer over TCP (RFC 5936 AXFR, RFC 1995 IXFR) and the SOA serial check,
//! blocking with timeouts, TSIG-signed when the zone has a key (every answer message checked by
//! [`crate::dns::tsig::Signer`], RFC 8945 5.3.1), and turning what was transferred into
//! zone-file text the zone parser reads back. Knows nothing of timers or snapshots; applying
//! IXFR differences lives in [`super::ixfr`].

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder, NameEncoding};

use crate::dns::tsig::{self, AnswerError, Key, Signer};

/// A transfer gives up after this many messages or bytes: a primary that never ends the
/// stream does not hold the task (or memory) forever.
const MAX_MESSAGES: usize = 1_000_000;
const MAX_BYTES: usize = 512 * 1024 * 1024;

/// Why a transfer or check failed; names the primary.
#[derive(Debug, thiserror::Error)]
pub enum TransferError {
    #[error("{primary}: {action}: {source}")]
    Io {
        primary: SocketAddr,
        action: &'static str,
        source: std::io::Error,
    },
    #[error("{primary}: {message}")]
    Protocol {
        primary: SocketAddr,
        message: String,
    },
    /// The answer's TSIG failed (or the primary refused ours): nothing of it is used.
    #[error("{primary}: TSIG: {source}")]
    Tsig {
        primary: SocketAddr,
        source: AnswerError,
    },
}

impl TransferError {
    fn protocol(primary: SocketAddr, message: impl Into<String>) -> Self {
        TransferError::Protocol {
            primary,
            message: message.into(),
        }
    }
}

/// How to reach a primary: the key requests are signed with (and answers checked against),
/// and how long a connect or a read may take.
#[derive(Debug, Clone, Copy)]
pub struct Link<'k> {
    pub key: Option<&'k Key>,
    pub timeout: Duration,
}

/// The primary's current SOA serial for `origin` (asked over TCP).
pub fn soa_serial(
    primary: SocketAddr,
    origin: &Name,
    link: Link<'_>,
) -> Result<u32, TransferError> {
    let request = request_bytes(primary, origin, RecordType::SOA, None)?;
    let mut exchange = Exchange::start(primary, link, request)?;
    let message = exchange.next()?.0;
    exchange.finish()?;
    message
        .answers
        .iter()
        .find_map(soa_serial_of)
        .ok_or_else(|| TransferError::protocol(primary, "SOA answer without a SOA record"))
}

/// Every record of `origin` by AXFR, the SOA first (the closing SOA left out).
pub fn axfr(
    primary: SocketAddr,
    origin: &Name,
    link: Link<'_>,
) -> Result<Vec<Record>, TransferError> {
    let request = request_bytes(primary, origin, RecordType::AXFR, None)?;
    let mut exchange = Exchange::start(primary, link, request)?;
    let mut records: Vec<Record> = Vec::new();
    for _ in 0..MAX_MESSAGES {
        let message = exchange.next()?.0;
        for record in message.answers {
            let is_soa = record.record_type() == RecordType::SOA;
            if records.is_empty() && !is_soa {
                return Err(TransferError::protocol(
                    primary,
                    "AXFR does not start with the SOA",
                ));
            }
            if is_soa && !records.is_empty() {
                exchange.finish()?;
                return Ok(records);
            }
            records.push(record);
        }
        if exchange.bytes > MAX_BYTES {
            break;
        }
    }
    Err(TransferError::protocol(
        primary,
        "AXFR too large or never closed by a SOA",
    ))
}

/// One difference sequence of an IXFR (RFC 1995 section 4): the old SOA and the records
/// deleted, the new SOA and the records added.
#[derive(Debug, Clone)]
pub struct Difference {
    pub from: u32,
    pub to: u32,
    /// The old SOA first.
    pub deleted: Vec<Record>,
    /// The new SOA first.
    pub added: Vec<Record>,
}

/// What a primary answered an IXFR with.
#[derive(Debug)]
pub enum Ixfr {
    /// Its current SOA alone: it has no differences from our serial (RFC 1995 section 2).
    SoaOnly(u32),
    /// The whole zone, AXFR style (the SOA first, the closing SOA left out).
    Full(Vec<Record>),
    /// Difference sequences in order, to the serial given.
    Differences {
        serial: u32,
        differences: Vec<Difference>,
    },
}

/// IXFR of `origin` from the version whose SOA we hold (`soa`: its TTL and wire RDATA).
pub fn ixfr(
    primary: SocketAddr,
    origin: &Name,
    soa: (u32, &[u8]),
    link: Link<'_>,
) -> Result<Ixfr, TransferError> {
    let request = request_bytes(primary, origin, RecordType::IXFR, Some(soa))?;
    let mut exchange = Exchange::start(primary, link, request)?;
    let mut stream = IxfrStream::default();
    for _ in 0..MAX_MESSAGES {
        let message = exchange.next()?.0;
        let first_message = stream.first.is_none();
        let single = message.answers.len() == 1;
        for record in message.answers {
            stream
                .push(record)
                .map_err(|e| TransferError::protocol(primary, e))?;
        }
        if first_message && single && stream.first.is_some() {
            // One message with one SOA: the condensed "no differences" answer; nothing follows.
            exchange.finish()?;
            return Ok(Ixfr::SoaOnly(stream.serial));
        }
        if stream.done {
            exchange.finish()?;
            return Ok(stream.into_answer());
        }
        if exchange.bytes > MAX_BYTES {
            break;
        }
    }
    Err(TransferError::protocol(
        primary,
        "IXFR too large or never closed by a SOA",
    ))
}

/// The records of an IXFR answer as they arrive, sorted into its form (RFC 1995 section 4).
#[derive(Default)]
struct IxfrStream {
    /// The first record (the primary's current SOA) and its serial.
    first: Option<Record>,
    serial: u32,
    full: Option<Vec<Record>>,
    differences: Vec<Difference>,
    adding: bool,
    done: bool,
}

impl IxfrStream {
    fn push(&mut self, record: Record) -> Result<(), String> {
        if self.done {
            return Err("records after the closing SOA".to_string());
        }
        let soa = soa_serial_of(&record);
        let Some(first) = &self.first else {
            self.serial = soa.ok_or("IXFR does not start with the SOA")?;
            self.first = Some(record);
            return Ok(());
        };
        if let Some(full) = &mut self.full {
            match soa {
                Some(_) => self.done = true,
                None => full.push(record),
            }
            return Ok(());
        }
        let Some(last) = self.differences.last_mut() else {
            match soa {
                None => self.full = Some(vec![first.clone(), record]),
                Some(serial) if serial == self.serial => self.done = true,
                Some(serial) => self.start_difference(serial, record),
            }
            return Ok(());
        };
        match (soa, self.adding) {
            (None, false) => last.deleted.push(record),
            (None, true) => last.added.push(record),
            (Some(serial), false) => {
                last.to = serial;
                last.added.push(record);
                self.adding = true;
            }
            (Some(serial), true) if serial == self.serial && last.to == self.serial => {
                self.done = true
            }
            (Some(serial), true) => self.start_difference(serial, record),
        }
        Ok(())
    }

    fn start_difference(&mut self, from: u32, old_soa: Record) {
        self.differences.push(Difference {
            from,
            to: from,
            deleted: vec![old_soa],
            added: Vec::new(),
        });
        self.adding = false;
    }

    fn into_answer(self) -> Ixfr {
        match (self.full, self.differences.is_empty()) {
            (Some(full), _) => Ixfr::Full(full),
            (None, true) => Ixfr::SoaOnly(self.serial),
            (None, false) => Ixfr::Differences {
                serial: self.serial,
                differences: self.differences,
            },
        }
    }
}

/// One request on its own connection and the answer messages read back, every one checked
/// against the request's TSIG when it was signed.
struct Exchange<'k> {
    stream: TcpStream,
    primary: SocketAddr,
    id: u16,
    signer: Option<Signer<'k>>,
    bytes: usize,
}

impl<'k> Exchange<'k> {
    /// Connects and sends `request`, signed with the link's key if there is one.
    fn start(
        primary: SocketAddr,
        link: Link<'k>,
        mut request: Vec<u8>,
    ) -> Result<Exchange<'k>, TransferError> {
        let id = u16::from_be_bytes([request[0], request[1]]);
        let signer = link.key.map(|key| {
            let mac = tsig::sign_request(&mut request, key, unix_now());
            Signer::for_answer_of(key, &mac)
        });
        let mut stream = connect(primary, link.timeout)?;
        let mut framed = (request.len() as u16).to_be_bytes().to_vec();
        framed.extend_from_slice(&request);
        stream
            .write_all(&framed)
            .map_err(|source| TransferError::Io {
                primary,
                action: "send the query",
                source,
            })?;
        Ok(Exchange {
            stream,
            primary,
            id,
            signer,
            bytes: 0,
        })
    }

    /// The next answer message (its TSIG checked first) and its length in bytes.
    fn next(&mut self) -> Result<(Message, usize), TransferError> {
        let primary = self.primary;
        let body = read_frame(&mut self.stream, primary)?;
        self.bytes += body.len();
        if let Some(signer) = &mut self.signer {
            signer
                .verify_next(&body, unix_now())
                .map_err(|source| TransferError::Tsig { primary, source })?;
        }
        let message = Message::from_vec(&body)
            .map_err(|e| TransferError::protocol(primary, format!("malformed message: {e}")))?;
        if message.metadata.id != self.id {
            return Err(TransferError::protocol(primary, "answer with another ID"));
        }
        check_response(&message, primary)?;
        Ok((message, body.len()))
    }

    /// The answer is complete: its last message must have carried a MAC.
    fn finish(&self) -> Result<(), TransferError> {
        match &self.signer {
            Some(signer) => signer.finish().map_err(|source| TransferError::Tsig {
                primary: self.primary,
                source,
            }),
            None => Ok(()),
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn connect(primary: SocketAddr, timeout: Duration) -> Result<TcpStream, TransferError> {
    let io = |action| {
        move |source| TransferError::Io {
            primary,
            action,
            source,
        }
    };
    let stream = TcpStream::connect_timeout(&primary, timeout).map_err(io("connect"))?;
    stream
        .set_read_timeout(Some(timeout))
        .map_err(io("set a read timeout"))?;
    stream
        .set_write_timeout(Some(timeout))
        .map_err(io("set a write timeout"))?;
    Ok(stream)
}

/// A query for `origin` and `rtype`, with the SOA we hold in the authority section for IXFR
/// (RFC 1995 section 3: its TTL and wire RDATA).
fn request_bytes(
    primary: SocketAddr,
    origin: &Name,
    rtype: RecordType,
    soa: Option<(u32, &[u8])>,
) -> Result<Vec<u8>, TransferError> {
    let mut message = Message::new(rand_id(), MessageType::Query, OpCode::Query);
    message.add_query(Query::query(origin.clone(), rtype));
    let mut bytes = message
        .to_vec()
        .map_err(|e| TransferError::protocol(primary, format!("cannot encode the query: {e}")))?;
    if let Some((ttl, rdata)) = soa {
        let rdlen = u16::try_from(rdata.len())
            .map_err(|_| TransferError::protocol(primary, "SOA RDATA too long"))?;
        bytes[8..10].copy_from_slice(&1u16.to_be_bytes()); // NSCOUNT
        bytes.extend_from_slice(&[0xC0, 12]); // the owner: the question's name
        bytes.extend_from_slice(&u16::from(RecordType::SOA).to_be_bytes());
        bytes.extend_from_slice(&1u16.to_be_bytes()); // IN
        bytes.extend_from_slice(&ttl.to_be_bytes());
        bytes.extend_from_slice(&rdlen.to_be_bytes());
        bytes.extend_from_slice(rdata);
    }
    Ok(bytes)
}

/// One length-prefixed message, as received.
fn read_frame(stream: &mut TcpStream, primary: SocketAddr) -> Result<Vec<u8>, TransferError> {
    let io = |source| TransferError::Io {
        primary,
        action: "read the answer",
        source,
    };
    let mut length = [0u8; 2];
    stream.read_exact(&mut length).map_err(io)?;
    let mut body = vec![0u8; usize::from(u16::from_be_bytes(length))];
    stream.read_exact(&mut body).map_err(io)?;
    Ok(body)
}

fn check_response(message: &Message, primary: SocketAddr) -> Result<(), TransferError> {
    let code = message.metadata.response_code;
    if message.metadata.message_type != MessageType::Response || code != ResponseCode::NoError {
        return Err(TransferError::protocol(primary, format!("answered {code}")));
    }
    Ok(())
}

fn soa_serial_of(record: &Record) -> Option<u32> {
    match &record.data {
        RData::SOA(soa) => Some(soa.serial),
        _ => None,
    }
}

fn rand_id() -> u16 {
    let mut bytes = [0u8; 2];
    let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut bytes);
    u16::from_be_bytes(bytes)
}

/// One record as the zone copy holds it: owner, TTL, type and uncompressed wire RDATA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub name: Name,
    pub ttl: u32,
    pub rtype: RecordType,
    pub rdata: Vec<u8>,
}

impl Entry {
    /// A transferred record as an entry (its RDATA encoded uncompressed).
    pub fn from_record(record: &Record) -> Result<Entry, String> {
        let rdata = uncompressed_rdata(&record.data).map_err(|e| {
            format!(
                "{} {}: cannot encode: {e}",
                record.name,
                record.record_type()
            )
        })?;
        Ok(Entry {
            name: record.name.clone(),
            ttl: record.ttl,
            rtype: record.record_type(),
            rdata,
        })
    }

    /// The same record: owner (letter case aside), type and RDATA; the TTL is not compared
    /// (RFC 1995 deletes an RR by its data).
    pub fn same_record(&self, other: &Entry) -> bool {
        self.rtype == other.rtype && self.name == other.name && self.rdata == other.rdata
    }
}

/// The records as zone-file text, every RDATA in RFC 3597 generic form (`\# LEN HEX`): exact
/// for every type, and read back by the same parser and validation as any zone file.
pub fn zone_text(records: &[Record]) -> Result<String, String> {
    let entries: Vec<Entry> = records
        .iter()
        .map(Entry::from_record)
        .collect::<Result<_, _>>()?;
    Ok(entries_text(&entries))
}

/// [`zone_text`] of entries.
pub fn entries_text(entries: &[Entry]) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    for entry in entries {
        let hex: String = entry.rdata.iter().map(|b| format!("{b:02x}")).collect();
        let _ = writeln!(
            text,
            "{} {} IN TYPE{} \\# {} {}",
            entry.name,
            entry.ttl,
            u16::from(entry.rtype),
            entry.rdata.len(),
            hex
        );
    }
    text
}

fn uncompressed_rdata(data: &RData) -> Result<Vec<u8>, hickory_proto::ProtoError> {
    let mut bytes = Vec::new();
    let mut encoder = BinEncoder::new(&mut bytes);
    encoder.set_name_encoding(NameEncoding::Uncompressed);
    data.emit(&mut encoder)?;
    Ok(bytes)
}

/// RFC 1982 serial arithmetic: is `a` newer than `b`?
pub fn serial_newer(a: u32, b: u32) -> bool {
    a != b && a.wrapping_sub(b) < 0x8000_0000
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::rr::rdata::{MX, NS, SOA};

    fn name(text: &str) -> Name {
        Name::from_ascii(text).unwrap()
    }

    fn soa_record(serial: u32) -> Record {
        let soa = SOA::new(
            name("ns1.sec.test."),
            name("hm.sec.test."),
            serial,
            60,
            30,
            600,
            60,
        );
        Record::from_rdata(name("sec.test."), 60, RData::SOA(soa))
    }

    fn ns_record(target: &str) -> Record {
        Record::from_rdata(name("sec.test."), 60, RData::NS(NS(name(target))))
    }

    fn stream_of(records: Vec<Record>) -> IxfrStream {
        let mut stream = IxfrStream::default();
        for record in records {
            stream.push(record).expect("in order");
        }
        stream
    }

    #[test]
    fn an_ixfr_answer_is_sorted_into_differences_or_a_whole_zone() {
        // RFC 1995 section 7's shape: 1 -> 2 -> 3, closed by the SOA of 3.
        let stream = stream_of(vec![
            soa_record(3),
            soa_record(1),
            ns_record("old.sec.test."),
            soa_record(2),
            ns_record("mid.sec.test."),
            soa_record(2),
            soa_record(3),
            ns_record("new.sec.test."),
            soa_record(3),
        ]);
        assert!(stream.done);
        let Ixfr::Differences {
            serial,
            differences,
        } = stream.into_answer()
        else {
            panic!("not differences");
        };
        assert_eq!(serial, 3);
        let chain: Vec<(u32, u32, usize, usize)> = differences
            .iter()
            .map(|d| (d.from, d.to, d.deleted.len(), d.added.len()))
            .collect();
        assert_eq!(chain, vec![(1, 2, 2, 2), (2, 3, 1, 2)]);

        let full = stream_of(vec![
            soa_record(3),
            ns_record("ns1.sec.test."),
            soa_record(3),
        ]);
        assert!(full.done);
        assert!(matches!(full.into_answer(), Ixfr::Full(records) if records.len() == 2));

        let mut closed = stream_of(vec![soa_record(3), soa_record(3)]);
        assert!(closed.done);
        assert!(closed.push(ns_record("late.sec.test.")).is_err());
        let mut headless = IxfrStream::default();
        assert!(headless.push(ns_record("ns1.sec.test.")).is_err());
    }

    #[test]
    fn serial_arithmetic_wraps_per_rfc_1982() {
        assert!(serial_newer(2, 1));
        assert!(serial_newer(0, u32::MAX));
        assert!(!serial_newer(1, 1));
        assert!(!serial_newer(1, 2));
        assert!(!serial_newer(0x8000_0001, 1));
    }

    #[test]
    fn transferred_records_read_back_as_the_same_wire_data() {
        let origin = name("sec.test.");
        let soa = SOA::new(
            name("ns1.sec.test."),
            name("hm.sec.test."),
            7,
            60,
            30,
            600,
            60,
        );
        let records = vec![
            Record::from_rdata(origin.clone(), 60, RData::SOA(soa)),
            Record::from_rdata(origin.clone(), 60, RData::NS(NS(name("ns1.sec.test.")))),
            Record::from_rdata(
                origin.clone(),
                60,
                RData::MX(MX::new(10, name("mx.Other."))),
            ),
        ];
        let text = zone_text(&records).unwrap();
        let path = std::path::Path::new("sec.test.zone");
        let parsed = crate::zone::parse::parse_zone_text(&text, path, &origin).unwrap();
        assert_eq!(parsed.records.len(), 3);
        for (record, read) in records.iter().zip(&parsed.records) {
            assert_eq!(read.rdata, uncompressed_rdata(&record.data).unwrap());
            assert_eq!(read.ttl, 60);
            assert_eq!(read.name, record.name);
        }
        // The MX exchange keeps its letter case and is not compressed against the owner.
        assert!(parsed.records[2].rdata.ends_with(b"\x02mx\x05Other\x00"));
    }
}
