//! Who may transfer a zone out (issue 33 item 1): the decision for one AXFR/IXFR request
//! from its client address, its TSIG check and the zone's allow list and keys.
//!
//! Owns the default: refused unless the zone allows the client's network, and a signature
//! with one of the zone's keys required for anything but loopback unless the zone says
//! otherwise. Pure: the caller verified the TSIG ([`crate::dns::tsig::verify_request`]) and
//! answers REFUSED (or NOTAUTH for a bad signature) with the reason counted.

use std::net::IpAddr;

use ipnet::IpNet;

/// The transfer rules of one zone.
#[derive(Debug, Clone, Default)]
pub struct TransferAcl {
    /// Networks whose clients may transfer; empty: nobody.
    pub allow: Vec<IpNet>,
    /// Names of the keys a request may be signed with (lower case, no final dot).
    pub keys: Vec<String>,
    /// Accept unsigned requests from allowed non-loopback networks (off by default).
    pub allow_unsigned: bool,
}

/// The TSIG state of a request, as the caller found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature<'k> {
    Unsigned,
    /// Verified with the key of this name.
    SignedWith(&'k str),
}

/// The decision, with the reason of a refusal (a metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Refuse(RefusalReason),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalReason {
    /// The client's address is in none of the allowed networks.
    Network,
    /// Unsigned, and the client is not on loopback.
    Unsigned,
    /// Signed with a key this zone does not list.
    Key,
}

impl RefusalReason {
    pub fn as_str(self) -> &'static str {
        match self {
            RefusalReason::Network => "network",
            RefusalReason::Unsigned => "unsigned",
            RefusalReason::Key => "key",
        }
    }
}

impl TransferAcl {
    /// May `client`, with this signature, transfer the zone?
    pub fn decide(&self, client: IpAddr, signature: Signature<'_>) -> Decision {
        if !self.allow.iter().any(|net| net.contains(&client)) {
            return Decision::Refuse(RefusalReason::Network);
        }
        match signature {
            Signature::SignedWith(name) if self.lists_key(name) => Decision::Allow,
            Signature::SignedWith(_) => Decision::Refuse(RefusalReason::Key),
            Signature::Unsigned if self.allow_unsigned || client.is_loopback() => Decision::Allow,
            Signature::Unsigned => Decision::Refuse(RefusalReason::Unsigned),
        }
    }

    fn lists_key(&self, name: &str) -> bool {
        let name = name.trim_end_matches('.');
        self.keys.iter().any(|k| k.eq_ignore_ascii_case(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl(allow: &[&str], keys: &[&str]) -> TransferAcl {
        TransferAcl {
            allow: allow.iter().map(|n| n.parse().expect("net")).collect(),
            keys: keys.iter().map(|k| k.to_string()).collect(),
            allow_unsigned: false,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("address")
    }

    #[test]
    fn nothing_is_allowed_by_default() {
        let decision = TransferAcl::default().decide(ip("127.0.0.1"), Signature::Unsigned);
        assert_eq!(decision, Decision::Refuse(RefusalReason::Network));
    }

    #[test]
    fn loopback_may_go_unsigned_others_need_a_listed_key() {
        let acl = acl(&["127.0.0.0/8", "192.0.2.0/24"], &["transfer-key"]);
        assert_eq!(
            acl.decide(ip("127.0.0.2"), Signature::Unsigned),
            Decision::Allow
        );
        assert_eq!(
            acl.decide(ip("192.0.2.9"), Signature::Unsigned),
            Decision::Refuse(RefusalReason::Unsigned)
        );
        assert_eq!(
            acl.decide(ip("192.0.2.9"), Signature::SignedWith("Transfer-Key.")),
            Decision::Allow
        );
        assert_eq!(
            acl.decide(ip("192.0.2.9"), Signature::SignedWith("other")),
            Decision::Refuse(RefusalReason::Key)
        );
        assert_eq!(
            acl.decide(ip("198.51.100.1"), Signature::SignedWith("transfer-key")),
            Decision::Refuse(RefusalReason::Network)
        );
    }

    #[test]
    fn a_zone_may_accept_unsigned_requests_from_its_networks() {
        let mut acl = acl(&["192.0.2.0/24"], &[]);
        acl.allow_unsigned = true;
        assert_eq!(
            acl.decide(ip("192.0.2.9"), Signature::Unsigned),
            Decision::Allow
        );
    }
}
