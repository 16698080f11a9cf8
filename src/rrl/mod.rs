//! Response rate limiting (RRL, as in Knot and BIND): keeps the server from being a useful
//! reflector for spoofed-source floods.
//!
//! Every UDP response is put in a *class* (positive answer, NODATA, NXDOMAIN, referral, error)
//! and charged to a token bucket keyed by the client's prefix (/24 for IPv4, /56 for IPv6 by
//! default), the class, and what the response is about: the name and type for answers and
//! NODATA, the zone for NXDOMAIN and referrals (so random subdomains share one bucket), nothing
//! more for errors. A key over its rate gets no response, except every `slip`-th one, which is
//! sent truncated (TC=1, no records) so a real resolver behind a spoofed prefix retries over
//! TCP, where the source address is proven and nothing is limited.
//!
//! Owns the bucket table ([`table`]), the coarse clock ([`clock`]) and the
//! verdict. Does not touch the bytes of a response (the DNS layer truncates on a slip) and
//! never limits TCP or exempt clients. The serving path only reads the clock, hashes the key
//! and does one compare-and-swap: no lock, no allocation, no I/O.

pub mod budget;
pub mod clock;
pub mod table;

use std::cell::Cell;
use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use crate::config::rrl::{RrlConfig, MAX_RATE, MAX_TABLE};
use crate::dns::sent::Sent;
use crate::dns::wire::rcode;
use crate::dns::wire::{Requester, Transport};
use table::{hash_bytes, hash_value, Rate, Table};

/// What kind of response is being limited; each has buckets of its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// NOERROR with records in the answer section (or truncated for size).
    Answer,
    /// NOERROR, authoritative, nothing in the answer section.
    Nodata,
    Nxdomain,
    /// NOERROR, not authoritative, name servers in the authority section.
    Referral,
    /// Any other rcode: REFUSED, FORMERR, SERVFAIL, NOTIMP, BADVERS.
    Error,
}

impl Class {
    pub const ALL: [Class; 5] = [
        Class::Answer,
        Class::Nodata,
        Class::Nxdomain,
        Class::Referral,
        Class::Error,
    ];

    /// The metrics label.
    pub fn name(self) -> &'static str {
        match self {
            Class::Answer => "answer",
            Class::Nodata => "nodata",
            Class::Nxdomain => "nxdomain",
            Class::Referral => "referral",
            Class::Error => "error",
        }
    }

    /// Position in [`Class::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The class of a response, from what its writer says it holds.
    #[inline]
    pub fn of(sent: &Sent) -> Class {
        match sent.rcode {
            rcode::NOERROR if sent.answers || sent.truncated => Class::Answer,
            rcode::NOERROR if sent.referral => Class::Referral,
            rcode::NOERROR => Class::Nodata,
            rcode::NXDOMAIN => Class::Nxdomain,
            _ => Class::Error,
        }
    }
}

/// What a response is about, beyond the client and the class.
#[derive(Clone, Copy, Debug)]
pub struct Subject<'a> {
    /// The question name in wire format, lower-cased.
    pub qname: &'a [u8],
    pub qtype: u16,
    /// Index of the zone the name is in, if any.
    pub zone: Option<usize>,
}

/// What to do with a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Send,
    /// Send it truncated: header and question, TC=1, no records.
    Slip,
    Drop,
}

thread_local! {
    // Limited responses seen by this thread, modulo `slip` (a `const` cell: no allocation).
    pub(crate) static LIMITED: Cell<u32> = const { Cell::new(0) };
}

/// The limits `[rrl]` asks for, compiled into a snapshot; the buckets they are charged to
/// live in a [`RateLimiter`].
#[derive(Debug, Clone)]
pub struct RrlLimits {
    rate: Rate,
    slip: u32,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
    exempt: Vec<IpNet>,
    /// Buckets in the table (a power of two).
    table_size: usize,
}

impl RrlLimits {
    /// `None` when `[rrl]` is disabled. The config must have passed [`RrlConfig::problem`];
    /// out-of-range values are clamped here rather than trusted.
    pub fn from_config(config: &RrlConfig) -> Option<RrlLimits> {
        if !config.enabled {
            return None;
        }
        let per_second = config.responses_per_second.clamp(1, MAX_RATE);
        Some(RrlLimits {
            rate: Rate {
                per_second,
                burst: config.burst.unwrap_or(per_second).clamp(1, MAX_RATE),
            },
            slip: config.slip,
            ipv4_prefix: config.ipv4_prefix.clamp(1, 32),
            ipv6_prefix: config.ipv6_prefix.clamp(1, 128),
            exempt: config.exempt.clone(),
            table_size: Table::len_for(config.table_size.clamp(1, MAX_TABLE)),
        })
    }
}

/// The limiter of one snapshot: its limits, and buckets that outlive reloads.
pub struct RateLimiter {
    limits: RrlLimits,
    table: Arc<Table>,
}

impl RateLimiter {
    /// A limiter for `limits`, charging the buckets of `previous` (the limiter of the snapshot
    /// served until now) when the table has the same size, so that a reload during a flood
    /// does not hand every key a fresh burst; fresh buckets otherwise.
    pub fn new(limits: &RrlLimits, previous: Option<&RateLimiter>) -> RateLimiter {
        RateLimiter {
            limits: limits.clone(),
            table: Table::carried(limits.table_size, previous.map(|p| &p.table)),
        }
    }

    /// A limiter with fresh buckets; `None` when `[rrl]` is disabled.
    pub fn from_config(config: &RrlConfig) -> Option<RateLimiter> {
        RrlLimits::from_config(config).map(|limits| RateLimiter::new(&limits, None))
    }

    /// The verdict on one response to `client`; `None` for TCP, which is never limited (the
    /// caller counts a verdict in the serving metrics).
    pub fn check(
        &self,
        client: &Requester,
        class: Class,
        subject: Option<&Subject<'_>>,
    ) -> Option<Verdict> {
        if client.transport != Transport::Udp {
            return None;
        }
        let verdict = LIMITED
            .try_with(|limited| {
                self.check_at(client.addr, class, subject, clock::now_ms(), limited)
            })
            .unwrap_or(Verdict::Send);
        Some(verdict)
    }

    /// [`RateLimiter::check`] at a given time with a given slip counter (tests use a fake
    /// clock).
    pub fn check_at(
        &self,
        addr: IpAddr,
        class: Class,
        subject: Option<&Subject<'_>>,
        now_ms: u32,
        limited: &Cell<u32>,
    ) -> Verdict {
        if self.limits.exempt.iter().any(|net| net.contains(&addr)) {
            return Verdict::Send;
        }
        let slot = self.table.slot(|h| self.hash_key(h, addr, class, subject));
        if self.table.take(slot, now_ms, self.limits.rate) {
            return Verdict::Send;
        }
        slip_or_drop(self.limits.slip, limited)
    }

    fn hash_key(
        &self,
        h: &mut dyn std::hash::Hasher,
        addr: IpAddr,
        class: Class,
        subject: Option<&Subject<'_>>,
    ) {
        hash_value(h, self.prefix(addr));
        hash_value(h, class.index() as u8);
        let Some(subject) = subject else { return };
        match class {
            Class::Answer | Class::Nodata => {
                hash_bytes(h, subject.qname);
                if class == Class::Answer {
                    hash_value(h, subject.qtype);
                }
            }
            Class::Nxdomain | Class::Referral => hash_value(h, subject.zone),
            Class::Error => {}
        }
    }

    /// The client's network: the address with the host bits cleared (and the family).
    fn prefix(&self, addr: IpAddr) -> (u8, u128) {
        match addr {
            IpAddr::V4(v4) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.limits.ipv4_prefix))
                    .unwrap_or(0);
                (4, u128::from(u32::from(v4) & mask))
            }
            IpAddr::V6(v6) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.limits.ipv6_prefix))
                    .unwrap_or(0);
                (6, u128::from(v6) & mask)
            }
        }
    }
}

/// Every `slip`-th limited response (counted in `limited`) is truncated, the rest dropped.
pub(crate) fn slip_or_drop(slip: u32, limited: &Cell<u32>) -> Verdict {
    if slip == 0 {
        return Verdict::Drop;
    }
    let n = limited.get().wrapping_add(1) % slip;
    limited.set(n);
    if n == 0 {
        Verdict::Slip
    } else {
        Verdict::Drop
    }
}

#[cfg(test)]
mod tests;
