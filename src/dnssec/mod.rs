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
//! period ([`sign::Window`]), so two nodes that built their snapshots in the same period send
//! RRSIGs with identical fields. Ed25519 signatures (algorithm 15) are deterministic, so those
//! are byte-identical; ECDSA P-256 (13) signatures differ in bytes from node to node (ring draws
//! a fresh nonce) but every one validates under the same DNSKEY, which is what a validator
//! that asks different nameservers needs: never a key it has not seen.
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
