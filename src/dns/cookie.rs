//! DNS Cookies (RFC 7873) with the interoperable server cookie of RFC 9018.
//!
//! A query's COOKIE option carries the client's 8-byte cookie and, once the client has
//! learnt one, the server cookie we gave it. Ours is RFC 9018's, so every node (and any
//! other RFC 9018 server) configured with the same secret verifies every other's:
//!
//! ```text
//! version (1) | reserved (3, zero) | timestamp (4, seconds, serial arithmetic) | hash (8)
//! hash = SipHash-2-4(secret; client cookie | version | reserved | timestamp | client IP)
//! ```
//!
//! A server cookie that verifies proves the query's source address: whoever sent it received
//! our earlier answer at that address. That is what the shield's demand count needs (see
//! `DemandCounters::counted_address`): a spoofed UDP source cannot return a valid cookie.
//!
//! Owns the option's format, the hash and the timestamp window. No allocation: a cookie is
//! a few fixed arrays; one SipHash per verification or issue (~20 ns). The secret is loaded
//! by the snapshot (`[server.cookies]`); this module never reads files or clocks.

use std::hash::Hasher;
use std::net::IpAddr;

use siphasher::sip::SipHasher24;

/// Length of a client cookie (RFC 7873 §4.1).
pub const CLIENT_LEN: usize = 8;
/// Smallest and largest server cookie a query may carry (RFC 7873 §4.2).
pub const MIN_SERVER_LEN: usize = 8;
pub const MAX_SERVER_LEN: usize = 32;
/// Length of our server cookies (RFC 9018 §4: version 1).
pub const SERVER_LEN: usize = 16;
const VERSION: u8 = 1;

/// A cookie verifies for an hour after it was issued (RFC 9018 §4.3) ...
const LIFETIME_SECS: u32 = 3600;
/// ... and up to five minutes before, for clocks that differ across a fleet.
const FUTURE_SKEW_SECS: u32 = 300;
/// A valid cookie younger than this is echoed as it is; older, the client gets a fresh one
/// (RFC 9018 §4.3: renew once it is half an hour old).
const RENEW_AFTER_SECS: u32 = 1800;

/// The COOKIE option of a message: the client cookie and the server cookie (empty when the
/// client has none yet). In a query it is what the client sent; [`CookieSecrets::check`]
/// turns it into the one we send back. Only a 16-byte server cookie can be ours, so only
/// that length is kept: a query's cookie of another length is remembered as such (never
/// valid) without its bytes, which keeps every parsed query small.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Cookie {
    pub client: [u8; CLIENT_LEN],
    server: [u8; SERVER_LEN],
    /// The server cookie's length as sent (0: none; only 16 has its bytes in `server`).
    server_len: u8,
}

impl std::fmt::Debug for Cookie {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Cookie({}:{})",
            data_encoding::HEXLOWER.encode(&self.client),
            data_encoding::HEXLOWER.encode(self.server())
        )
    }
}

impl Cookie {
    /// Reads a COOKIE option's data; `None` when it is malformed (RFC 7873 §5.2.2: anything
    /// but 8 bytes, or 16 to 40), which the caller answers with FORMERR.
    pub fn parse(data: &[u8]) -> Option<Cookie> {
        let (client, server) = data.split_at_checked(CLIENT_LEN)?;
        if !(server.is_empty() || (MIN_SERVER_LEN..=MAX_SERVER_LEN).contains(&server.len())) {
            return None;
        }
        Some(Cookie {
            client: client.try_into().ok()?,
            server: server.try_into().unwrap_or([0; SERVER_LEN]),
            server_len: server.len() as u8,
        })
    }

    /// The server cookie, when it has our length (empty when the client sent only its own,
    /// or one of another length: see [`Self::has_server`]).
    pub fn server(&self) -> &[u8] {
        match usize::from(self.server_len) {
            SERVER_LEN => &self.server,
            _ => &[],
        }
    }

    /// Whether the client sent a server cookie (of any length).
    pub fn has_server(&self) -> bool {
        self.server_len != 0
    }

    /// The option's data length as [`Self::write`] writes it (client and server cookie).
    pub fn len(&self) -> usize {
        CLIENT_LEN + self.server().len()
    }

    /// Never: a cookie always holds its client part (for clippy's `len` convention).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Writes the option's data (client then server cookie) into `out`, which must hold
    /// [`Self::len`] bytes.
    pub fn write(&self, out: &mut [u8]) {
        out[..CLIENT_LEN].copy_from_slice(&self.client);
        out[CLIENT_LEN..self.len()].copy_from_slice(self.server());
    }

    fn with_server(&self, server: [u8; SERVER_LEN]) -> Cookie {
        Cookie {
            client: self.client,
            server,
            server_len: SERVER_LEN as u8,
        }
    }
}

/// What a query's server cookie proved (RFC 7873 §5.2.3–5.2.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Only a client cookie: the client has not learnt ours yet (§5.2.3).
    ClientOnly,
    /// A server cookie that is not ours, not for this client address, or out of its time
    /// window (§5.2.4: treated as if only the client cookie were there).
    Invalid,
    /// Ours, for this address, within its window (§5.2.5): the source is proven.
    Valid,
}

impl Verdict {
    pub const ALL: [Verdict; 3] = [Verdict::ClientOnly, Verdict::Invalid, Verdict::Valid];

    pub fn label(self) -> &'static str {
        match self {
            Verdict::ClientOnly => "client_only",
            Verdict::Invalid => "invalid",
            Verdict::Valid => "valid",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// The server secret (SipHash-2-4 key) and, while a new one is rolled out across a fleet,
/// the one before it, still accepted (RFC 9018 §5: every node first accepts the new secret,
/// then issues with it, then drops the old).
#[derive(Clone, PartialEq, Eq)]
pub struct CookieSecrets {
    current: [u8; 16],
    previous: Option<[u8; 16]>,
}

impl std::fmt::Debug for CookieSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CookieSecrets(..)")
    }
}

impl CookieSecrets {
    pub fn new(current: [u8; 16], previous: Option<[u8; 16]>) -> CookieSecrets {
        CookieSecrets { current, previous }
    }

    /// Whether a previous secret is still accepted.
    pub fn has_previous(&self) -> bool {
        self.previous.is_some()
    }

    /// Verifies `cookie`'s server part for a query from `client` at `now` (seconds since the
    /// epoch, modulo 2^32).
    pub fn verify(&self, cookie: &Cookie, client: IpAddr, now: u32) -> Verdict {
        self.check(cookie, client, now).0
    }

    /// Verifies `cookie` and makes the one to answer with (RFC 7873 §5.2: the client's
    /// cookie and a server cookie, whatever the verdict): a valid cookie the current secret
    /// made is echoed while it is younger than half an hour; otherwise a fresh one, stamped
    /// `now`. One hash in the common cases, two when a cookie is renewed.
    pub fn check(&self, cookie: &Cookie, client: IpAddr, now: u32) -> (Verdict, Cookie) {
        let fresh = |verdict| {
            (
                verdict,
                cookie.with_server(self.issue(&cookie.client, client, now)),
            )
        };
        if !cookie.has_server() {
            return fresh(Verdict::ClientOnly);
        }
        let Ok(server) = <[u8; SERVER_LEN]>::try_from(cookie.server()) else {
            return fresh(Verdict::Invalid);
        };
        let stamp = timestamp(&server);
        if server[0] != VERSION || !within_window(stamp, now) {
            return fresh(Verdict::Invalid);
        }
        let head: [u8; 8] = server[..8].try_into().unwrap_or_default();
        let hash = &server[8..];
        let made_with = |key: &[u8; 16]| hash_of(key, &cookie.client, &head, client) == hash;
        if made_with(&self.current) {
            if now.wrapping_sub(stamp) < RENEW_AFTER_SECS {
                return (Verdict::Valid, *cookie);
            }
            return fresh(Verdict::Valid);
        }
        if self.previous.as_ref().is_some_and(made_with) {
            return fresh(Verdict::Valid);
        }
        fresh(Verdict::Invalid)
    }

    /// A fresh server cookie for `client_cookie` from `client`, stamped `now`.
    pub fn issue(&self, client_cookie: &[u8; CLIENT_LEN], client: IpAddr, now: u32) -> [u8; 16] {
        let mut server = [0u8; SERVER_LEN];
        server[0] = VERSION;
        server[4..8].copy_from_slice(&now.to_be_bytes());
        let head: [u8; 8] = server[..8].try_into().unwrap_or_default();
        server[8..].copy_from_slice(&hash_of(&self.current, client_cookie, &head, client));
        server
    }
}

fn timestamp(server: &[u8; SERVER_LEN]) -> u32 {
    u32::from_be_bytes([server[4], server[5], server[6], server[7]])
}

/// Whether a cookie stamped `stamp` verifies at `now`: at most an hour old, at most five
/// minutes ahead, in serial-number arithmetic (the 32-bit timestamp wraps in 2106).
fn within_window(stamp: u32, now: u32) -> bool {
    let age = now.wrapping_sub(stamp);
    let ahead = stamp.wrapping_sub(now);
    age <= LIFETIME_SECS || ahead <= FUTURE_SKEW_SECS
}

/// RFC 9018 §4.4: SipHash-2-4 over client cookie | version | reserved | timestamp | client
/// IP (4 or 16 bytes), as the hash's 8 output bytes.
fn hash_of(key: &[u8; 16], client_cookie: &[u8; 8], head: &[u8; 8], client: IpAddr) -> [u8; 8] {
    let mut hasher = SipHasher24::new_with_key(key);
    hasher.write(client_cookie);
    hasher.write(head);
    match client {
        IpAddr::V4(v4) => hasher.write(&v4.octets()),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => hasher.write(&v4.octets()),
            None => hasher.write(&v6.octets()),
        },
    }
    hasher.finish().to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(s: &str) -> Vec<u8> {
        data_encoding::HEXLOWER.decode(s.as_bytes()).unwrap()
    }

    fn secret(s: &str) -> [u8; 16] {
        hex(s).try_into().unwrap()
    }

    fn cookie(s: &str) -> Cookie {
        Cookie::parse(&hex(s)).unwrap()
    }

    fn wire(cookie: &Cookie) -> String {
        let mut out = [0u8; 40];
        cookie.write(&mut out);
        data_encoding::HEXLOWER.encode(&out[..cookie.len()])
    }

    /// RFC 9018 Appendix A, every example: A.1 a new cookie, A.2 the same client renewing
    /// it 40 minutes later, A.3 another client (reserved bits set) renewing an older one,
    /// A.4 an IPv6 client whose cookie the previous secret made.
    #[test]
    fn rfc_9018_test_vectors() {
        let a12 = CookieSecrets::new(secret("e5e973e5a6b2a43f48e7dc849e37bfcf"), None);
        let client: IpAddr = "198.51.100.100".parse().unwrap();

        // A.1: only a client cookie; the server issues one.
        let query = cookie("2464c4abcf10c957");
        assert_eq!(a12.verify(&query, client, 1559731985), Verdict::ClientOnly);
        let answer = a12.check(&query, client, 1559731985).1;
        assert_eq!(
            wire(&answer),
            "2464c4abcf10c957010000005cf79f111f8130c3eee29480"
        );

        // A.2: 40 minutes later, valid and renewed (older than half an hour).
        let now = 1559734385;
        assert_eq!(a12.verify(&answer, client, now), Verdict::Valid);
        let renewed = a12.check(&answer, client, now).1;
        assert_eq!(
            wire(&renewed),
            "2464c4abcf10c957010000005cf7a871d4a564a1442aca77"
        );

        // A.3: reserved bits the client's cookie carries are hashed as they are. Its cookie
        // was issued at 1559727985, 1h52m before the example's query: beyond the hour this
        // server accepts (RFC 9018 §4.3), so it is checked at its issue time, and the
        // query's answer is a fresh cookie.
        let client: IpAddr = "203.0.113.203".parse().unwrap();
        let query = cookie("fc93fc62807ddb8601abcdef5cf78f71a314227b6679ebf5");
        assert_eq!(a12.verify(&query, client, 1559727985), Verdict::Valid);
        assert_eq!(a12.verify(&query, client, 1559734700), Verdict::Invalid);
        let answer = a12.check(&query, client, 1559734700).1;
        assert_eq!(
            wire(&answer),
            "fc93fc62807ddb86010000005cf7a9acf73a7810aca2381e"
        );

        // A.4: the secret rolled over; the old one is still accepted, and the answer is made
        // with the new one.
        let rolled = CookieSecrets::new(
            secret("445536bcd2513298075a5d379663c962"),
            Some(secret("dd3bdf9344b678b185a6f5cb60fca715")),
        );
        let client: IpAddr = "2001:db8:220:1:59de:d0f4:8769:82b8".parse().unwrap();
        let query = cookie("22681ab97d52c298010000005cf7c57926556bd0934c72f8");
        let now = 1559741961;
        assert_eq!(rolled.verify(&query, client, now), Verdict::Valid);
        let answer = rolled.check(&query, client, now).1;
        assert_eq!(
            wire(&answer),
            "22681ab97d52c298010000005cf7c609a6bb79d16625507a"
        );
        let new_only = CookieSecrets::new(secret("445536bcd2513298075a5d379663c962"), None);
        assert_eq!(new_only.verify(&query, client, now), Verdict::Invalid);
    }

    #[test]
    fn malformed_lengths_are_refused() {
        for len in [0, 1, 7, 9, 15, 41, 48] {
            assert!(Cookie::parse(&vec![7; len]).is_none(), "{len} bytes");
        }
        for len in [8, 16, 24, 40] {
            let parsed = Cookie::parse(&vec![7; len]).unwrap();
            assert_eq!(parsed.has_server(), len > 8);
            assert_eq!(parsed.server().len(), if len == 24 { 16 } else { 0 });
        }
    }

    #[test]
    fn a_cookie_is_valid_only_for_its_address_secret_and_window() {
        let secrets = CookieSecrets::new([9; 16], None);
        let client: IpAddr = "192.0.2.1".parse().unwrap();
        let query = Cookie::parse(&[1; 8]).unwrap();
        let now = 1_000_000;
        let issued = secrets.check(&query, client, now).1;
        assert_eq!(issued.len(), 24);
        assert_eq!(secrets.verify(&issued, client, now), Verdict::Valid);
        let other: IpAddr = "192.0.2.2".parse().unwrap();
        assert_eq!(secrets.verify(&issued, other, now), Verdict::Invalid);
        let mapped: IpAddr = "::ffff:192.0.2.1".parse().unwrap();
        assert_eq!(secrets.verify(&issued, mapped, now), Verdict::Valid);
        let stranger = CookieSecrets::new([8; 16], None);
        assert_eq!(stranger.verify(&issued, client, now), Verdict::Invalid);
        // An hour old, the last second it holds; five minutes ahead, the most it may be.
        assert_eq!(secrets.verify(&issued, client, now + 3600), Verdict::Valid);
        assert_eq!(
            secrets.verify(&issued, client, now + 3601),
            Verdict::Invalid
        );
        assert_eq!(secrets.verify(&issued, client, now - 300), Verdict::Valid);
        assert_eq!(secrets.verify(&issued, client, now - 301), Verdict::Invalid);
        // Young: echoed as it is; past half an hour: renewed.
        assert_eq!(secrets.check(&issued, client, now + 60).1, issued);
        let renewed = secrets.check(&issued, client, now + 1800).1;
        assert_ne!(renewed, issued);
        assert_eq!(secrets.verify(&renewed, client, now + 1800), Verdict::Valid);
        // Across the 32-bit wrap.
        let late = secrets.check(&query, client, u32::MAX - 100).1;
        assert_eq!(secrets.verify(&late, client, 1000), Verdict::Valid);
        // Server cookies of another length or version are not ours.
        assert_eq!(
            secrets.verify(&Cookie::parse(&[1; 16]).unwrap(), client, now),
            Verdict::Invalid
        );
        let mut bad_version = [0u8; 24];
        issued.write(&mut bad_version);
        bad_version[8] = 2;
        let bad_version = Cookie::parse(&bad_version).unwrap();
        assert_eq!(secrets.verify(&bad_version, client, now), Verdict::Invalid);
    }
}
