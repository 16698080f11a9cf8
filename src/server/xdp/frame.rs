//! Ethernet/IP/UDP framing for the AF_XDP path: find the DNS payload of a received frame, and
//! turn the same frame into the reply in place (swap addresses and ports, set lengths, compute
//! checksums). Pure byte work: no sockets, no allocation, unit-tested on its own.
//!
//! Only what the XDP program redirects reaches here (IPv4 without options, not fragmented;
//! IPv6 whose next header is UDP), but every length is checked again: a frame is input.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const ETH_HEADER: usize = 14;
const IPV4_HEADER: usize = 20;
const IPV6_HEADER: usize = 40;
const UDP_HEADER: usize = 8;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const PROTO_UDP: u8 = 17;
/// Hop limit / TTL of our replies.
const REPLY_HOPS: u8 = 64;

/// Where the DNS payload of a received frame is, and who sent it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram {
    /// Bytes before the DNS payload (Ethernet + IP + UDP headers).
    pub header_len: usize,
    /// Length of the DNS payload.
    pub payload_len: usize,
    pub source: IpAddr,
    pub source_port: u16,
    pub destination_port: u16,
}

/// Why a frame is not answered (counted, then the frame is recycled).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unanswerable {
    /// Shorter than its headers say, or a length field that does not add up.
    Malformed,
    /// Not UDP over IPv4/IPv6 as the XDP program selects (a bug there, or an odd frame).
    NotUdp,
}

fn u16_at(frame: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([frame[at], frame[at + 1]])
}

/// Parses the headers of a received frame.
pub fn parse(frame: &[u8]) -> Result<Datagram, Unanswerable> {
    if frame.len() < ETH_HEADER {
        return Err(Unanswerable::Malformed);
    }
    let (ip_header, source) = match u16_at(frame, 12) {
        ETHERTYPE_IPV4 => {
            let ip = ETH_HEADER;
            if frame.len() < ip + IPV4_HEADER + UDP_HEADER {
                return Err(Unanswerable::Malformed);
            }
            let fragmented = u16_at(frame, ip + 6) & 0x3fff != 0;
            if frame[ip] != 0x45 || frame[ip + 9] != PROTO_UDP || fragmented {
                return Err(Unanswerable::NotUdp);
            }
            let total = usize::from(u16_at(frame, ip + 2));
            if total < IPV4_HEADER + UDP_HEADER || ip + total > frame.len() {
                return Err(Unanswerable::Malformed);
            }
            let mut source = [0u8; 4];
            source.copy_from_slice(&frame[ip + 12..ip + 16]);
            (IPV4_HEADER, IpAddr::V4(Ipv4Addr::from(source)))
        }
        ETHERTYPE_IPV6 => {
            let ip = ETH_HEADER;
            if frame.len() < ip + IPV6_HEADER + UDP_HEADER {
                return Err(Unanswerable::Malformed);
            }
            if frame[ip] >> 4 != 6 || frame[ip + 6] != PROTO_UDP {
                return Err(Unanswerable::NotUdp);
            }
            let payload = usize::from(u16_at(frame, ip + 4));
            if payload < UDP_HEADER || ip + IPV6_HEADER + payload > frame.len() {
                return Err(Unanswerable::Malformed);
            }
            let mut source = [0u8; 16];
            source.copy_from_slice(&frame[ip + 8..ip + 24]);
            (IPV6_HEADER, IpAddr::V6(Ipv6Addr::from(source)))
        }
        _ => return Err(Unanswerable::NotUdp),
    };
    let udp = ETH_HEADER + ip_header;
    let udp_len = usize::from(u16_at(frame, udp + 4));
    if udp_len < UDP_HEADER || udp + udp_len > frame.len() {
        return Err(Unanswerable::Malformed);
    }
    Ok(Datagram {
        header_len: udp + UDP_HEADER,
        payload_len: udp_len - UDP_HEADER,
        source,
        source_port: u16_at(frame, udp),
        destination_port: u16_at(frame, udp + 2),
    })
}

/// Rewrites the headers of a received frame (described by `datagram`) into the reply's, for a
/// DNS payload of `payload_len` bytes already written at `datagram.header_len`. Returns the
/// frame's new length.
pub fn turn_into_reply(frame: &mut [u8], datagram: &Datagram, payload_len: usize) -> usize {
    let (mac_dst, mac_src) = frame[..12].split_at_mut(6);
    mac_dst.swap_with_slice(mac_src);
    let ip = ETH_HEADER;
    let udp = datagram.header_len - UDP_HEADER;
    let udp_len = UDP_HEADER + payload_len;
    let end = udp + udp_len;
    match datagram.source {
        IpAddr::V4(_) => {
            let (src, dst) = frame[ip + 12..ip + 20].split_at_mut(4);
            src.swap_with_slice(dst);
            put_u16(frame, ip + 2, (IPV4_HEADER + udp_len) as u16);
            put_u16(frame, ip + 4, 0); // identification: not fragmented
            put_u16(frame, ip + 6, 0x4000); // don't fragment
            frame[ip + 8] = REPLY_HOPS;
            put_u16(frame, ip + 10, 0);
            let sum = ones_complement_sum(&frame[ip..ip + IPV4_HEADER], 0);
            put_u16(frame, ip + 10, !fold(sum));
        }
        IpAddr::V6(_) => {
            let (src, dst) = frame[ip + 8..ip + 40].split_at_mut(16);
            src.swap_with_slice(dst);
            put_u16(frame, ip + 4, udp_len as u16);
            frame[ip + 7] = REPLY_HOPS;
        }
    }
    put_u16(frame, udp, datagram.destination_port);
    put_u16(frame, udp + 2, datagram.source_port);
    put_u16(frame, udp + 4, udp_len as u16);
    put_u16(frame, udp + 6, 0);
    let checksum = udp_checksum(frame, datagram, udp, end);
    put_u16(frame, udp + 6, checksum);
    end
}

/// RFC 768 / RFC 8200 §8.1: over the pseudo-header and the whole UDP datagram. Computed for
/// IPv4 too (optional there), so nothing downstream has to trust a zero.
fn udp_checksum(frame: &[u8], datagram: &Datagram, udp: usize, end: usize) -> u16 {
    let ip = ETH_HEADER;
    let addresses = match datagram.source {
        IpAddr::V4(_) => &frame[ip + 12..ip + 20],
        IpAddr::V6(_) => &frame[ip + 8..ip + 40],
    };
    let udp_len = (end - udp) as u32;
    let pseudo = u32::from(PROTO_UDP) + udp_len;
    let sum = ones_complement_sum(addresses, pseudo);
    let sum = ones_complement_sum(&frame[udp..end], sum);
    match !fold(sum) {
        0 => 0xffff, // zero means "no checksum" in UDP
        c => c,
    }
}

fn put_u16(frame: &mut [u8], at: usize, value: u16) {
    frame[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

/// Adds `bytes` as big-endian 16-bit words (odd length padded with zero) to `sum`.
fn ones_complement_sum(bytes: &[u8], mut sum: u32) -> u32 {
    let mut words = bytes.chunks_exact(2);
    for word in &mut words {
        sum = sum.wrapping_add(u32::from(u16::from_be_bytes([word[0], word[1]])));
        // Fold early so that long payloads never overflow 32 bits.
        if sum > 0xffff_0000 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
    }
    if let [last] = words.remainder() {
        sum = sum.wrapping_add(u32::from(*last) << 8);
    }
    sum
}

fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// Rewrites a DNS response in `payload` (of `len` bytes) that does not fit the link into
/// header + question with TC set and no other records, so the client retries over TCP
/// (RFC 2181 §9). Returns the new length, or `None` if the response is not parseable.
pub fn truncate_to_question(payload: &mut [u8], len: usize) -> Option<usize> {
    let bytes = payload.get(..len)?;
    if bytes.len() < 12 || u16_at(bytes, 4) != 1 {
        return None;
    }
    let mut at = 12;
    loop {
        let label = usize::from(*bytes.get(at)?);
        if label == 0 {
            at += 1;
            break;
        }
        if label & 0xc0 != 0 {
            return None; // a question name is never compressed
        }
        at += 1 + label;
    }
    let end = at + 4;
    if end > bytes.len() {
        return None;
    }
    payload[2] |= 0x02; // TC
    payload[6..12].fill(0);
    Some(end)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query frame as a client's stack builds it (valid checksums).
    fn query_frame(v6: bool, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 0];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 1]); // dst mac (server)
        f.extend_from_slice(&[2, 0, 0, 0, 0, 2]); // src mac (client)
        let udp_len = (UDP_HEADER + payload.len()) as u16;
        if v6 {
            f.extend_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            f.extend_from_slice(&[0x60, 0, 0, 0]);
            f.extend_from_slice(&udp_len.to_be_bytes());
            f.extend_from_slice(&[PROTO_UDP, 64]);
            f.extend_from_slice(&"fd00::2".parse::<Ipv6Addr>().unwrap().octets());
            f.extend_from_slice(&"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        } else {
            f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
            f.extend_from_slice(&[0x45, 0]);
            f.extend_from_slice(&(20 + udp_len).to_be_bytes());
            f.extend_from_slice(&[0x12, 0x34, 0x40, 0, 64, PROTO_UDP, 0, 0]);
            f.extend_from_slice(&[198, 18, 0, 2, 198, 18, 0, 1]);
        }
        f.extend_from_slice(&40000u16.to_be_bytes());
        f.extend_from_slice(&53u16.to_be_bytes());
        f.extend_from_slice(&udp_len.to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        f
    }

    /// Checks a checksum the way a receiver does: the sum over everything is 0xffff.
    fn verifies(parts: &[&[u8]], pseudo: u32) -> bool {
        let mut sum = pseudo;
        for p in parts {
            sum = ones_complement_sum(p, sum);
        }
        fold(sum) == 0xffff
    }

    #[test]
    fn parses_v4_and_v6_and_turns_them_into_valid_replies() {
        for v6 in [false, true] {
            let query =
                b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x03www\x00\x00\x01\x00\x01";
            let mut frame = query_frame(v6, query);
            frame.resize(2048, 0);
            let d = parse(&frame).unwrap();
            assert_eq!(d.payload_len, query.len());
            assert_eq!(d.source_port, 40000);
            assert_eq!(d.destination_port, 53);
            assert_eq!(&frame[d.header_len..d.header_len + d.payload_len], query);
            // A longer reply (odd length, to cover padding) written after the headers.
            let reply: Vec<u8> = (0..301u16).map(|i| i as u8).collect();
            frame[d.header_len..d.header_len + reply.len()].copy_from_slice(&reply);
            let end = turn_into_reply(&mut frame, &d, reply.len());
            let frame = &frame[..end];
            assert_eq!(
                &frame[..6],
                &[2, 0, 0, 0, 0, 2],
                "destination is the client"
            );
            let back = parse(frame).unwrap();
            assert_eq!(back.source_port, 53);
            assert_eq!(back.destination_port, 40000);
            assert_eq!(back.payload_len, reply.len());
            let udp = back.header_len - UDP_HEADER;
            let pseudo = u32::from(PROTO_UDP) + (UDP_HEADER + reply.len()) as u32;
            if v6 {
                assert_eq!(back.source, "fd00::1".parse::<IpAddr>().unwrap());
                assert!(verifies(&[&frame[22..54], &frame[udp..]], pseudo));
            } else {
                assert_eq!(back.source, "198.18.0.1".parse::<IpAddr>().unwrap());
                assert!(verifies(&[&frame[14..34]], 0), "IPv4 header checksum");
                assert!(verifies(&[&frame[26..34], &frame[udp..]], pseudo));
            }
        }
    }

    #[test]
    fn refuses_what_does_not_add_up() {
        let query = [0u8; 20];
        let good = query_frame(false, &query);
        for cut in [0, 13, 20, 41] {
            assert_eq!(
                parse(&good[..cut]),
                Err(Unanswerable::Malformed),
                "cut {cut}"
            );
        }
        let mut lying = good.clone();
        lying[14 + 24 + 1] = 200; // UDP length longer than the frame
        assert_eq!(parse(&lying), Err(Unanswerable::Malformed));
        let mut fragment = good.clone();
        fragment[14 + 6] = 0x20; // more fragments
        assert_eq!(parse(&fragment), Err(Unanswerable::NotUdp));
        let mut tcp = good.clone();
        tcp[14 + 9] = 6;
        assert_eq!(parse(&tcp), Err(Unanswerable::NotUdp));
        let mut arp = good;
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert_eq!(parse(&arp), Err(Unanswerable::NotUdp));
    }

    #[test]
    fn truncation_keeps_the_question_and_sets_tc() {
        let mut response = b"\x12\x34\x84\x00\x00\x01\x00\x02\x00\x00\x00\x01\x03big\x00\x00\x10\x00\x01rest-of-answer".to_vec();
        let len = response.len();
        let n = truncate_to_question(&mut response, len).unwrap();
        assert_eq!(n, 12 + 5 + 4);
        assert_eq!(response[2] & 0x02, 0x02);
        assert_eq!(&response[4..12], &[0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(truncate_to_question(&mut response, 11), None);
    }
}
