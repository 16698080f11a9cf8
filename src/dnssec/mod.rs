//! DNSSEC: keys, signatures and the authenticated denial chain.
//!
//! A pure core that the snapshot builder calls, off the serving path: it loads the zone keys
//! from the key directory ([`keys`]), signs a compiled zone in place ([`zone::sign_zone`]:
//! DNSKEY/CDS/CDNSKEY at the apex, an NSEC chain, an RRSIG on every authoritative RRset) and
//! pre-signs every address set and CNAME a steering policy can answer with ([`steered`]), so
//! that a DO query costs a lookup, never a signature. The serving path only copies the
//! records built here.
//!
//! Every node of a fleet serves the same keys (the key directory travels with the config) and
//! signs with the same validity window: inception and expiration are aligned to the refresh
//! period ([`sign::Window`]). Signing is deterministic — Ed25519 (15) by definition, ECDSA
//! P-256 (13) with RFC 6979 nonces derived from the key and the data ([`keys::Key::sign`]) — so
//! two nodes that built their snapshots in the same period send byte-identical RRSIGs: a
//! validator asking different nameservers never sees a signature or key the others lack.
//!
//! May import the DNS wire helpers, the zone model and the compiled policies; nothing above.

pub mod config;
pub mod dump;
pub mod keys;
pub mod rollover;
pub mod sign;
pub mod steered;
pub mod zone;

pub use config::DnssecConfig;
pub use keys::{Algorithm, Key, KeyError, Role};
pub use sign::Window;
pub use steered::SteeredSigs;

/// What the snapshot keeps of signing: the steered answers' signatures, the window, and per
/// signed zone what was signed with which keys (for status).
#[derive(Default)]
pub struct Signing {
    pub steered: SteeredSigs,
    pub window: Option<Window>,
    pub zones: Vec<(String, zone::Signed)>,
    /// The keys signed with (zone, tag, timing): a reload whose keys differ signs again.
    pub keys: Vec<(String, u16, keys::Timing)>,
}
