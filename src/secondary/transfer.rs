//! One incoming transfer over TCP (RFC 5936 AXFR) and the SOA serial check, blocking with
//! timeouts, and turning what was transferred into zone-file text the zone parser reads back.
//! Knows nothing of timers or snapshots.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, Record, RecordType};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder, NameEncoding};

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
}

impl TransferError {
    fn protocol(primary: SocketAddr, message: impl Into<String>) -> Self {
        TransferError::Protocol {
            primary,
            message: message.into(),
        }
    }
}

/// The primary's current SOA serial for `origin` (asked over TCP).
pub fn soa_serial(
    primary: SocketAddr,
    origin: &Name,
    timeout: Duration,
) -> Result<u32, TransferError> {
    let mut stream = connect(primary, timeout)?;
    send_query(&mut stream, primary, origin, RecordType::SOA)?;
    let message = read_message(&mut stream, primary)?;
    check_response(&message, primary)?;
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
    timeout: Duration,
) -> Result<Vec<Record>, TransferError> {
    let mut stream = connect(primary, timeout)?;
    send_query(&mut stream, primary, origin, RecordType::AXFR)?;
    let mut records: Vec<Record> = Vec::new();
    let mut bytes = 0usize;
    for _ in 0..MAX_MESSAGES {
        let (message, length) = read_message_counted(&mut stream, primary)?;
        check_response(&message, primary)?;
        bytes += length;
        for record in message.answers {
            let is_soa = record.record_type() == RecordType::SOA;
            if records.is_empty() && !is_soa {
                return Err(TransferError::protocol(
                    primary,
                    "AXFR does not start with the SOA",
                ));
            }
            if is_soa && !records.is_empty() {
                return Ok(records);
            }
            records.push(record);
        }
        if bytes > MAX_BYTES {
            break;
        }
    }
    Err(TransferError::protocol(
        primary,
        "AXFR too large or never closed by a SOA",
    ))
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

fn send_query(
    stream: &mut TcpStream,
    primary: SocketAddr,
    origin: &Name,
    rtype: RecordType,
) -> Result<(), TransferError> {
    let mut message = Message::new(rand_id(), MessageType::Query, OpCode::Query);
    message.add_query(Query::query(origin.clone(), rtype));
    let bytes = message
        .to_vec()
        .map_err(|e| TransferError::protocol(primary, format!("cannot encode the query: {e}")))?;
    let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&bytes);
    stream
        .write_all(&framed)
        .map_err(|source| TransferError::Io {
            primary,
            action: "send the query",
            source,
        })
}

fn read_message(stream: &mut TcpStream, primary: SocketAddr) -> Result<Message, TransferError> {
    read_message_counted(stream, primary).map(|(message, _)| message)
}

/// One length-prefixed message and its length in bytes.
fn read_message_counted(
    stream: &mut TcpStream,
    primary: SocketAddr,
) -> Result<(Message, usize), TransferError> {
    let io = |source| TransferError::Io {
        primary,
        action: "read the answer",
        source,
    };
    let mut length = [0u8; 2];
    stream.read_exact(&mut length).map_err(io)?;
    let mut body = vec![0u8; usize::from(u16::from_be_bytes(length))];
    stream.read_exact(&mut body).map_err(io)?;
    let message = Message::from_vec(&body)
        .map_err(|e| TransferError::protocol(primary, format!("malformed message: {e}")))?;
    Ok((message, body.len()))
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

/// The records as zone-file text, every RDATA in RFC 3597 generic form (`\# LEN HEX`): exact
/// for every type, and read back by the same parser and validation as any zone file.
pub fn zone_text(records: &[Record]) -> Result<String, String> {
    use std::fmt::Write as _;
    let mut text = String::new();
    for record in records {
        let rdata = uncompressed_rdata(&record.data).map_err(|e| {
            format!(
                "{} {}: cannot encode: {e}",
                record.name,
                record.record_type()
            )
        })?;
        let hex: String = rdata.iter().map(|b| format!("{b:02x}")).collect();
        let _ = writeln!(
            text,
            "{} {} IN TYPE{} \\# {} {}",
            record.name,
            record.ttl,
            u16::from(record.record_type()),
            rdata.len(),
            if hex.is_empty() { String::new() } else { hex }
        );
    }
    Ok(text)
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
