//! The `[dnssec]` section of the config file: plain data. What one zone is signed with (the
//! section's values under the zone's overrides, checked) is resolved by
//! [`super::settings::ZoneSettings`].

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// The shortest refresh period accepted. Every refresh rebuilds the signed snapshot (a
/// reload); seconds are for tests and demonstrations, a day is usual.
pub const MIN_REFRESH_SECS: u64 = 2;

/// `[dnssec]`: which zones to sign, with which keys and how.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DnssecConfig {
    /// Key directory (relative to the config file). Keys are made with `steerdns dnssec keygen`.
    pub keys: PathBuf,
    /// Zones to sign (absolute names, e.g. `example.com.`). Empty: DNSSEC off.
    pub zones: Vec<String>,
    /// Algorithm of new keys: 13 (ECDSA P-256 with SHA-256, the default) or 15 (Ed25519).
    pub algorithm: u8,
    /// Authenticated denial: `nsec` (the default) or `nsec3` (RFC 5155, hashed names: the
    /// zone cannot be walked name by name).
    pub denial: String,
    /// NSEC3 extra iterations: must be 0 (RFC 9276).
    pub nsec3_iterations: u16,
    /// NSEC3 salt: must be empty (RFC 9276).
    pub nsec3_salt: String,
    /// NSEC3 opt-out (RFC 5155 §6): delegations without DS get no NSEC3 record of their own
    /// (a referral proves their insecurity with the record covering them). For zones with
    /// many unsigned delegations; off by default.
    pub nsec3_opt_out: bool,
    /// How long a signature is valid (seconds; default 14 days).
    pub signature_validity_secs: u64,
    /// Signatures are renewed every this many seconds (default 1 day), by a reload the server
    /// starts itself; their inception and expiration are aligned to it, so every node of a
    /// fleet signs with the same window.
    pub refresh_secs: u64,
    /// TTL of the DNSKEY, CDS and CDNSKEY RRsets.
    pub dnskey_ttl: u32,
    /// Automatic rollover: a ZSK (or CSK) is replaced after this many seconds (0: never).
    pub zsk_lifetime_secs: u64,
    /// Automatic rollover of a KSK (0: never).
    pub ksk_lifetime_secs: u64,
    /// Extra time allowed for a change to reach every secondary and cache, on top of TTLs.
    pub propagation_delay_secs: u64,
    /// How long the parent's DS TTL is assumed to be during a KSK/CSK rollover.
    pub parent_ds_ttl: u32,
    /// `[dnssec.zone."NAME"]`: settings of one zone of `zones` that differ from the values
    /// above (by zone name as written).
    pub zone: BTreeMap<String, DnssecZoneOverrides>,
}

/// `[dnssec.zone."NAME"]`: one zone's own values of the `[dnssec]` settings; each one left out
/// is the section's.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DnssecZoneOverrides {
    pub keys: Option<PathBuf>,
    pub algorithm: Option<u8>,
    pub denial: Option<String>,
    pub nsec3_iterations: Option<u16>,
    pub nsec3_salt: Option<String>,
    pub nsec3_opt_out: Option<bool>,
    pub signature_validity_secs: Option<u64>,
    pub refresh_secs: Option<u64>,
    pub dnskey_ttl: Option<u32>,
    pub zsk_lifetime_secs: Option<u64>,
    pub ksk_lifetime_secs: Option<u64>,
    pub propagation_delay_secs: Option<u64>,
    pub parent_ds_ttl: Option<u32>,
}

impl Default for DnssecConfig {
    fn default() -> Self {
        DnssecConfig {
            keys: PathBuf::from("keys"),
            zones: Vec::new(),
            algorithm: 13,
            denial: "nsec".into(),
            nsec3_iterations: 0,
            nsec3_salt: String::new(),
            nsec3_opt_out: false,
            signature_validity_secs: 14 * 86400,
            refresh_secs: 86400,
            dnskey_ttl: 3600,
            zsk_lifetime_secs: 0,
            ksk_lifetime_secs: 0,
            propagation_delay_secs: 300,
            parent_ds_ttl: 86400,
            zone: BTreeMap::new(),
        }
    }
}

impl DnssecConfig {
    /// Is `zone` (absolute, any case) one to sign?
    pub fn signs(&self, zone: &str) -> bool {
        self.zones.iter().any(|z| z.eq_ignore_ascii_case(zone))
    }

    /// The overrides of `zone` (absolute, any case), as (the table's name as written, values).
    pub fn overrides(&self, zone: &str) -> Option<(&str, &DnssecZoneOverrides)> {
        self.zone
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(zone))
            .map(|(name, values)| (name.as_str(), values))
    }
}
