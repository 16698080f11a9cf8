//! Reading a query off the wire, in place.
//!
//! The parser never allocates: the question name is copied (lower-cased) into a fixed buffer on
//! the stack, and everything else is offsets into the packet. Every read is bounds-checked; a
//! packet that lies about its lengths is answered with FORMERR or dropped, never trusted.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::cookie::Cookie;

pub const HEADER_LEN: usize = 12;
/// RFC 1035 limit on a name in wire format, including the root label.
pub const MAX_NAME_LEN: usize = 255;

/// Record types the answer path treats specially.
pub mod rtype {
    pub const A: u16 = 1;
    pub const NS: u16 = 2;
    pub const CNAME: u16 = 5;
    pub const SOA: u16 = 6;
    pub const MX: u16 = 15;
    pub const TXT: u16 = 16;
    pub const AAAA: u16 = 28;
    pub const SRV: u16 = 33;
    pub const OPT: u16 = 41;
    pub const DS: u16 = 43;
    pub const RRSIG: u16 = 46;
    pub const NSEC: u16 = 47;
    pub const DNSKEY: u16 = 48;
    pub const NSEC3: u16 = 50;
    pub const NSEC3PARAM: u16 = 51;
    pub const CDS: u16 = 59;
    pub const CDNSKEY: u16 = 60;
    pub const IXFR: u16 = 251;
    pub const AXFR: u16 = 252;
    pub const MAILB: u16 = 253;
    pub const MAILA: u16 = 254;
    pub const ANY: u16 = 255;
}

pub mod class {
    pub const IN: u16 = 1;
    pub const CH: u16 = 3;
    pub const ANY: u16 = 255;
}

/// Response codes, including the extended ones carried in OPT.
pub mod rcode {
    pub const NOERROR: u16 = 0;
    pub const FORMERR: u16 = 1;
    pub const SERVFAIL: u16 = 2;
    pub const NXDOMAIN: u16 = 3;
    pub const NOTIMP: u16 = 4;
    pub const REFUSED: u16 = 5;
    pub const BADVERS: u16 = 16;
    /// RFC 7873 §8: a server cookie is needed (or was wrong); the client retries with ours.
    pub const BADCOOKIE: u16 = 23;
}

/// EDNS option codes we read.
pub mod option {
    pub const NSID: u16 = 3;
    pub const CLIENT_SUBNET: u16 = 8;
    /// RFC 7873 DNS Cookies.
    pub const COOKIE: u16 = 10;
}

/// Header flag bits (in the 16-bit flags word).
pub mod flag {
    pub const QR: u16 = 0x8000;
    pub const AA: u16 = 0x0400;
    pub const TC: u16 = 0x0200;
    pub const RD: u16 = 0x0100;
    pub const CD: u16 = 0x0010;
}

/// A domain name in uncompressed wire format, lower-cased, with the offset of every label so
/// that each suffix (each ancestor) is a slice of the same buffer.
#[derive(Clone)]
pub struct WireName {
    buf: [u8; MAX_NAME_LEN],
    len: u8,
    label_starts: [u8; 128],
    labels: u8,
}

impl WireName {
    pub const fn root() -> Self {
        WireName {
            buf: [0; MAX_NAME_LEN],
            len: 1,
            label_starts: [0; 128],
            labels: 0,
        }
    }

    /// Parses an uncompressed name from `packet` at `pos`; returns the name and the offset just
    /// past it. Compression pointers are refused: nothing precedes the question in a query.
    pub fn parse_uncompressed(packet: &[u8], pos: usize) -> Option<(Self, usize)> {
        let mut name = WireName::root();
        let end = name.read_uncompressed(packet, pos)?;
        Some((name, end))
    }

    /// [`WireName::parse_uncompressed`] into this name, replacing it (the serving path parses
    /// in place: a `WireName` is ~400 bytes, and moving it costs more than parsing it).
    pub fn read_uncompressed(&mut self, packet: &[u8], start: usize) -> Option<usize> {
        // Walk the length bytes first, then copy and lower-case the whole name in one go (length
        // bytes are below 64, so lower-casing leaves them alone).
        self.labels = 0;
        let mut pos = start;
        let mut out = 0usize;
        loop {
            let len = *packet.get(pos)? as usize;
            if len == 0 {
                break;
            }
            if len > 63 || out + 1 + len + 1 > MAX_NAME_LEN {
                return None;
            }
            self.label_starts[self.labels as usize] = out as u8;
            self.labels += 1;
            out += 1 + len;
            pos += 1 + len;
        }
        let total = out + 1;
        let name = &mut self.buf[..total];
        name.copy_from_slice(packet.get(start..start + total)?);
        name.make_ascii_lowercase();
        self.len = total as u8;
        Some(pos + 1)
    }

    /// Builds from an already valid, uncompressed wire name (e.g. one stored in a zone).
    pub fn from_wire(wire: &[u8]) -> Option<Self> {
        let (name, end) = Self::parse_uncompressed(wire, 0)?;
        (end == wire.len()).then_some(name)
    }

    /// The whole name, lower-cased, in wire format.
    pub fn as_wire(&self) -> &[u8] {
        &self.buf[..self.len as usize]
    }

    pub fn wire_len(&self) -> usize {
        self.len as usize
    }

    /// Number of labels, not counting the root.
    pub fn label_count(&self) -> usize {
        self.labels as usize
    }

    /// The ancestor that drops the first `skip` labels (`skip == label_count()` is the root).
    pub fn suffix(&self, skip: usize) -> &[u8] {
        let start = if skip >= self.labels as usize {
            self.len as usize - 1
        } else {
            self.label_starts[skip] as usize
        };
        &self.buf[start..self.len as usize]
    }
}

impl std::fmt::Debug for WireName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&display_wire_name(self.as_wire()))
    }
}

/// Presentation form of an uncompressed wire name, for logs and traces (allocates).
pub fn display_wire_name(wire: &[u8]) -> String {
    let mut out = String::new();
    let mut pos = 0;
    while let Some(&len) = wire.get(pos) {
        if len == 0 {
            break;
        }
        let label = wire.get(pos + 1..pos + 1 + len as usize).unwrap_or(&[]);
        for &b in label {
            if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'*' {
                out.push(b as char);
            } else {
                out.push_str(&format!("\\{b:03}"));
            }
        }
        out.push('.');
        pos += 1 + len as usize;
    }
    if out.is_empty() {
        out.push('.');
    }
    out
}

/// The EDNS Client Subnet option of a query (RFC 7871), already validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientSubnet {
    pub source_prefix: u8,
    pub addr: IpAddr,
}

impl ClientSubnet {
    pub fn family(&self) -> u16 {
        match self.addr {
            IpAddr::V4(_) => 1,
            IpAddr::V6(_) => 2,
        }
    }
}

/// What the OPT record of a query asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edns {
    pub udp_payload: u16,
    pub version: u8,
    pub dnssec_ok: bool,
    pub nsid_requested: bool,
    pub client_subnet: Option<ClientSubnet>,
    /// The first COOKIE option (RFC 7873 §5.2: later ones are ignored). The answer path
    /// replaces its server cookie with the one to send back (`crate::answer`).
    pub cookie: Option<Cookie>,
}

/// A parsed query: header fields, the question, and EDNS.
#[derive(Clone, Debug)]
pub struct Query {
    pub id: u16,
    pub flags: u16,
    pub qname: WireName,
    /// Offsets of the question name in the packet, to echo the client's letter case.
    pub qname_range: (usize, usize),
    pub qtype: u16,
    pub qclass: u16,
    pub edns: Option<Edns>,
}

impl Query {
    /// A query to parse into ([`parse_query_into`]).
    pub fn blank() -> Query {
        Query {
            id: 0,
            flags: 0,
            qname: WireName::root(),
            qname_range: (HEADER_LEN, HEADER_LEN + 1),
            qtype: 0,
            qclass: 0,
            edns: None,
        }
    }

    /// The question (name, type, class) exactly as the client sent it.
    pub fn question_bytes<'p>(&self, packet: &'p [u8]) -> &'p [u8] {
        &packet[self.qname_range.0..self.qname_range.1 + 4]
    }
}

/// Why a packet cannot be answered normally.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Not worth a response: too short to carry a header, or itself a response.
    Drop,
    /// Answer with this rcode; the question is echoed when it could be read.
    Error {
        rcode: u16,
        question: Option<(usize, usize)>,
        edns: Option<Edns>,
    },
}

/// Parses a query. On success every field is validated; on failure the caller gets what it
/// needs to write a well-formed error response.
pub fn parse_query(packet: &[u8]) -> Result<Query, Reject> {
    let mut query = Query::blank();
    parse_query_into(packet, &mut query)?;
    Ok(query)
}

/// [`parse_query`] into `query` (the serving path's: no move of the parsed query).
pub fn parse_query_into(packet: &[u8], query: &mut Query) -> Result<(), Reject> {
    let header = packet.get(..HEADER_LEN).ok_or(Reject::Drop)?;
    let id = u16::from_be_bytes([header[0], header[1]]);
    let flags = u16::from_be_bytes([header[2], header[3]]);
    if flags & flag::QR != 0 {
        return Err(Reject::Drop);
    }
    let count = |i: usize| u16::from_be_bytes([header[i], header[i + 1]]);
    let (qdcount, ancount, nscount, arcount) = (count(4), count(6), count(8), count(10));
    let opcode = (flags >> 11) & 0xf;

    let formerr = |question, edns| Reject::Error {
        rcode: rcode::FORMERR,
        question,
        edns,
    };
    if qdcount != 1 {
        let rcode = if opcode != 0 {
            rcode::NOTIMP
        } else {
            rcode::FORMERR
        };
        return Err(Reject::Error {
            rcode,
            question: None,
            edns: None,
        });
    }
    let after_name = query
        .qname
        .read_uncompressed(packet, HEADER_LEN)
        .ok_or(formerr(None, None))?;
    let fixed = packet
        .get(after_name..after_name + 4)
        .ok_or(formerr(None, None))?;
    let qtype = u16::from_be_bytes([fixed[0], fixed[1]]);
    let qclass = u16::from_be_bytes([fixed[2], fixed[3]]);
    let question = Some((HEADER_LEN, after_name));

    let mut pos = after_name + 4;
    for _ in 0..(ancount as usize + nscount as usize) {
        pos = skip_record(packet, pos).ok_or(formerr(question, None))?;
    }
    let mut edns = None;
    for _ in 0..arcount {
        let (record, next) = read_record(packet, pos).ok_or(formerr(question, edns))?;
        if record.rtype == rtype::OPT {
            if edns.is_some() || !record.owner_is_root {
                return Err(formerr(question, edns));
            }
            match parse_opt(&record) {
                Ok(parsed) => edns = Some(parsed),
                // Answer FORMERR with our OPT (RFC 6891 §7), minus the option we refused.
                Err(base) => return Err(formerr(question, Some(base))),
            }
        }
        pos = next;
    }
    if opcode != 0 {
        return Err(Reject::Error {
            rcode: rcode::NOTIMP,
            question,
            edns,
        });
    }
    query.id = id;
    query.flags = flags;
    query.qname_range = (HEADER_LEN, after_name);
    query.qtype = qtype;
    query.qclass = qclass;
    query.edns = edns;
    Ok(())
}

struct RawRecord<'p> {
    owner_is_root: bool,
    rtype: u16,
    class: u16,
    ttl: u32,
    rdata: &'p [u8],
}

/// Skips a possibly compressed name; returns the offset after it.
fn skip_name(packet: &[u8], mut pos: usize) -> Option<usize> {
    for _ in 0..128 {
        let len = *packet.get(pos)?;
        match len {
            0 => return Some(pos + 1),
            1..=63 => pos += 1 + len as usize,
            0xC0..=0xFF => {
                packet.get(pos + 1)?;
                return Some(pos + 2);
            }
            _ => return None,
        }
    }
    None
}

fn read_record(packet: &[u8], pos: usize) -> Option<(RawRecord<'_>, usize)> {
    let owner_is_root = *packet.get(pos)? == 0;
    let after_name = skip_name(packet, pos)?;
    let fixed = packet.get(after_name..after_name + 10)?;
    let rdlen = u16::from_be_bytes([fixed[8], fixed[9]]) as usize;
    let rdata_start = after_name + 10;
    let rdata = packet.get(rdata_start..rdata_start + rdlen)?;
    let record = RawRecord {
        owner_is_root,
        rtype: u16::from_be_bytes([fixed[0], fixed[1]]),
        class: u16::from_be_bytes([fixed[2], fixed[3]]),
        ttl: u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]),
        rdata,
    };
    Some((record, rdata_start + rdlen))
}

fn skip_record(packet: &[u8], pos: usize) -> Option<usize> {
    read_record(packet, pos).map(|(_, next)| next)
}

/// Reads an OPT record; `Err` means FORMERR and carries the fixed OPT fields to echo.
fn parse_opt(record: &RawRecord<'_>) -> Result<Edns, Edns> {
    let base = Edns {
        udp_payload: record.class,
        version: (record.ttl >> 16) as u8,
        dnssec_ok: record.ttl & 0x8000 != 0,
        nsid_requested: false,
        client_subnet: None,
        cookie: None,
    };
    parse_options(record.rdata, base).ok_or(base)
}

fn parse_options(mut options: &[u8], base: Edns) -> Option<Edns> {
    let mut edns = base;
    while !options.is_empty() {
        let head = options.get(..4)?;
        let code = u16::from_be_bytes([head[0], head[1]]);
        let len = u16::from_be_bytes([head[2], head[3]]) as usize;
        let data = options.get(4..4 + len)?;
        match code {
            option::NSID => edns.nsid_requested = true,
            option::CLIENT_SUBNET => {
                if edns.client_subnet.is_some() {
                    return None;
                }
                edns.client_subnet = Some(parse_client_subnet(data)?);
            }
            // A malformed COOKIE is FORMERR (RFC 7873 §5.2.2); only the first counts.
            option::COOKIE if edns.cookie.is_none() => edns.cookie = Some(Cookie::parse(data)?),
            _ => {} // unknown options are ignored (RFC 6891 §6.1.2)
        }
        options = &options[4 + len..];
    }
    Some(edns)
}

/// Validates an ECS option per RFC 7871 §6: known family, prefix within the family, scope 0,
/// exactly ceil(prefix/8) address octets, and no bits set beyond the prefix.
fn parse_client_subnet(data: &[u8]) -> Option<ClientSubnet> {
    let head = data.get(..4)?;
    let family = u16::from_be_bytes([head[0], head[1]]);
    let source_prefix = head[2];
    let scope_prefix = head[3];
    let addr_bytes = &data[4..];
    let max_prefix = match family {
        1 => 32,
        2 => 128,
        _ => return None,
    };
    if source_prefix > max_prefix || scope_prefix != 0 {
        return None;
    }
    if addr_bytes.len() != (source_prefix as usize).div_ceil(8) {
        return None;
    }
    let mut full = [0u8; 16];
    full[..addr_bytes.len()].copy_from_slice(addr_bytes);
    if source_prefix % 8 != 0 {
        let last = addr_bytes[addr_bytes.len() - 1];
        let mask = 0xFFu8 >> (source_prefix % 8);
        if last & mask != 0 {
            return None;
        }
    }
    let addr = if family == 1 {
        IpAddr::V4(Ipv4Addr::new(full[0], full[1], full[2], full[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(full))
    };
    Some(ClientSubnet {
        source_prefix,
        addr,
    })
}

/// UDP payload size assumed for a query without EDNS (RFC 1035 §4.2.1).
pub const CLASSIC_UDP_LIMIT: usize = 512;
/// Largest DNS message (TCP).
pub const MAX_MESSAGE: usize = 65535;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    Udp,
    Tcp,
    /// DNS over TLS (RFC 7858).
    Tls,
    /// DNS over HTTPS (RFC 8484).
    Https,
    /// DNS over QUIC (RFC 9250).
    Quic,
}

/// Who asked, as the socket saw it: the source address and the transport. (Where the client
/// is, for steering, is located later from this address or the query's ECS option:
/// `policy::LocatedClient`.)
#[derive(Clone, Copy, Debug)]
pub struct Requester {
    pub addr: IpAddr,
    pub transport: Transport,
}

impl Requester {
    pub fn new(addr: IpAddr, transport: Transport) -> Self {
        // An IPv4 client on a dual-stack socket shows up as ::ffff:a.b.c.d.
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        Requester { addr, transport }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(name: &[u8], qtype: u16, additional: &[u8], arcount: u16) -> Vec<u8> {
        let mut p = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0];
        p.extend_from_slice(&arcount.to_be_bytes());
        p.extend_from_slice(name);
        p.extend_from_slice(&qtype.to_be_bytes());
        p.extend_from_slice(&1u16.to_be_bytes());
        p.extend_from_slice(additional);
        p
    }

    fn opt(options: &[u8]) -> Vec<u8> {
        let mut o = vec![0, 0, 41, 0x04, 0xd0, 0, 0, 0, 0];
        o.extend_from_slice(&(options.len() as u16).to_be_bytes());
        o.extend_from_slice(options);
        o
    }

    fn ecs(family: u16, source: u8, scope: u8, addr: &[u8]) -> Vec<u8> {
        let mut o = vec![0, 8];
        o.extend_from_slice(&((4 + addr.len()) as u16).to_be_bytes());
        o.extend_from_slice(&family.to_be_bytes());
        o.extend_from_slice(&[source, scope]);
        o.extend_from_slice(addr);
        o
    }

    #[test]
    fn parses_question_lowercased_with_label_suffixes() {
        let p = query(b"\x03WwW\x07Example\x03com\x00", 1, &[], 0);
        let q = parse_query(&p).unwrap();
        assert_eq!(q.qname.as_wire(), b"\x03www\x07example\x03com\x00");
        assert_eq!(q.qname.label_count(), 3);
        assert_eq!(q.qname.suffix(1), b"\x07example\x03com\x00");
        assert_eq!(q.qname.suffix(3), b"\x00");
        assert_eq!(q.question_bytes(&p)[1..4], *b"WwW");
        assert_eq!(q.id, 0x1234);
        assert!(q.edns.is_none());
    }

    #[test]
    fn reads_edns_payload_version_do_and_ecs() {
        let mut o = opt(&ecs(1, 24, 0, &[81, 2, 69]));
        o[7] = 0x80; // DO
        let p = query(b"\x01a\x00", 1, &o, 1);
        let e = parse_query(&p).unwrap().edns.unwrap();
        assert_eq!(e.udp_payload, 1232);
        assert!(e.dnssec_ok);
        assert_eq!(
            e.client_subnet,
            Some(ClientSubnet {
                source_prefix: 24,
                addr: "81.2.69.0".parse().unwrap()
            })
        );
    }

    #[test]
    fn invalid_ecs_is_formerr() {
        let bad = [
            ecs(1, 24, 0, &[81, 2]),         // too few address bytes
            ecs(1, 24, 0, &[81, 2, 69, 1]),  // too many
            ecs(1, 33, 0, &[1, 2, 3, 4, 5]), // prefix beyond family
            ecs(1, 23, 0, &[81, 2, 69]),     // bits beyond the prefix
            ecs(1, 24, 8, &[81, 2, 69]),     // scope set in a query
            ecs(3, 8, 0, &[1]),              // unknown family
            vec![0, 8, 0, 2, 0, 1],          // truncated option
        ];
        for option in bad {
            let p = query(b"\x01a\x00", 1, &opt(&option), 1);
            match parse_query(&p) {
                Err(Reject::Error { rcode, .. }) => assert_eq!(rcode, rcode::FORMERR),
                other => panic!("{option:?}: {other:?}"),
            }
        }
    }

    fn cookie_option(data: &[u8]) -> Vec<u8> {
        let mut o = vec![0, 10];
        o.extend_from_slice(&(data.len() as u16).to_be_bytes());
        o.extend_from_slice(data);
        o
    }

    #[test]
    fn reads_the_first_cookie_and_refuses_a_malformed_one() {
        let options = [cookie_option(&[1; 8]), cookie_option(&[2; 24])].concat();
        let p = query(b"\x01a\x00", 1, &opt(&options), 1);
        let cookie = parse_query(&p).unwrap().edns.unwrap().cookie.unwrap();
        assert_eq!((cookie.client, cookie.server()), ([1; 8], &[][..]));
        for len in [0, 7, 9, 15, 41] {
            let p = query(b"\x01a\x00", 1, &opt(&cookie_option(&vec![3; len])), 1);
            match parse_query(&p) {
                Err(Reject::Error { rcode, edns, .. }) => {
                    assert_eq!(rcode, rcode::FORMERR, "{len} bytes");
                    assert!(edns.is_some_and(|e| e.cookie.is_none()), "{len} bytes");
                }
                other => panic!("{len} bytes: {other:?}"),
            }
        }
    }

    #[test]
    fn ecs_with_zero_prefix_is_valid() {
        let p = query(b"\x01a\x00", 1, &opt(&ecs(2, 0, 0, &[])), 1);
        let e = parse_query(&p).unwrap().edns.unwrap();
        assert_eq!(e.client_subnet.unwrap().source_prefix, 0);
    }

    #[test]
    fn responses_and_runts_are_dropped() {
        assert_eq!(parse_query(&[0; 5]).unwrap_err(), Reject::Drop);
        let mut p = query(b"\x00", 1, &[], 0);
        p[2] |= 0x80;
        assert_eq!(parse_query(&p).unwrap_err(), Reject::Drop);
    }

    #[test]
    fn bad_shapes_get_an_rcode() {
        let mut two = query(b"\x00", 1, &[], 0);
        two[5] = 2;
        assert!(matches!(
            parse_query(&two),
            Err(Reject::Error { rcode: 1, .. })
        ));
        let mut notify = query(b"\x00", 6, &[], 0);
        notify[2] = 4 << 3;
        assert!(matches!(
            parse_query(&notify),
            Err(Reject::Error {
                rcode: 4,
                question: Some(_),
                ..
            })
        ));
        let pointer = query(b"\xc0\x0c", 1, &[], 0);
        assert!(matches!(
            parse_query(&pointer),
            Err(Reject::Error { rcode: 1, .. })
        ));
        let two_opts = [opt(&[]), opt(&[])].concat();
        let p = query(b"\x00", 1, &two_opts, 2);
        assert!(matches!(
            parse_query(&p),
            Err(Reject::Error { rcode: 1, .. })
        ));
    }

    #[test]
    fn never_panics_on_prefixes_of_a_valid_query() {
        let p = query(b"\x03www\x00", 1, &opt(&ecs(1, 24, 0, &[1, 2, 3])), 1);
        for cut in 0..p.len() {
            let _ = parse_query(&p[..cut]);
        }
    }
}
