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
//! Keys roll over by themselves when lifetimes are configured ([`rollover`]); the server's
//! re-signing thread (`crate::reload::resign`) carries the steps out.
//!
//! May import the DNS wire helpers, the zone model and the compiled policies; nothing above.

pub mod config;
pub mod dump;
pub mod keys;
pub mod rollover;
pub mod settings;
pub mod sign;
pub mod steered;
pub mod transfer;
pub mod zone;

pub use config::DnssecConfig;
pub use keys::{Algorithm, Key, KeyError, Role};
pub use settings::ZoneSettings;
pub use sign::Window;
pub use steered::SteeredSigs;

/// A key as the snapshot was signed with it (for status and to tell whether keys changed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRecord {
    pub zone: String,
    pub tag: u16,
    pub role: Role,
    pub algorithm: u8,
    pub timing: keys::Timing,
}

/// What the snapshot keeps of signing: the steered answers' signatures, and per signed zone
/// what was signed with which keys and for which window (for status and re-signing).
#[derive(Default)]
pub struct Signing {
    pub steered: SteeredSigs,
    pub zones: Vec<(String, zone::Signed)>,
    /// The keys signed with: a reload whose keys differ signs again.
    pub keys: Vec<KeyRecord>,
    /// When this was signed (Unix seconds): the keys' states are those at this time.
    pub signed_at: u64,
    /// When the next automatic rollover starts (`None`: no lifetime configured).
    pub rollover_at: Option<u64>,
}

impl Signing {
    /// When this must be signed again (Unix seconds): the next refresh of a zone's window,
    /// the next key event after it was signed (a key published, activated, retired or
    /// removed) or the start of the next rollover, whichever comes first.
    pub fn next_event(&self) -> Option<u64> {
        let key_events = self.keys.iter().flat_map(|k| k.timing.events());
        self.windows()
            .map(|w| w.refresh_at)
            .chain(key_events.filter(|&at| at > self.signed_at))
            .chain(self.rollover_at)
            .min()
    }

    /// Would signing at `now` give the same key states as this did?
    pub fn keys_unchanged_at(&self, now: u64) -> bool {
        self.keys
            .iter()
            .flat_map(|k| k.timing.events())
            .all(|at| at <= self.signed_at || at > now)
    }

    /// The window `zone` (normalized) was signed for.
    pub fn window_of(&self, zone: &str) -> Option<Window> {
        self.zones
            .iter()
            .find(|(z, _)| z == zone)
            .map(|(_, signed)| signed.window)
    }

    /// When every zone's signatures are valid, as (latest inception, earliest expiration).
    pub fn valid_everywhere(&self) -> Option<(u32, u32)> {
        let inception = self.windows().map(|w| w.inception).max()?;
        let expiration = self.windows().map(|w| w.expiration).min()?;
        Some((inception, expiration))
    }

    /// The shortest refresh period of the signed zones (seconds).
    pub fn shortest_refresh(&self) -> Option<u64> {
        self.windows().map(|w| w.refresh_at - w.start).min()
    }

    fn windows(&self) -> impl Iterator<Item = Window> + '_ {
        self.zones.iter().map(|(_, signed)| signed.window)
    }
}
