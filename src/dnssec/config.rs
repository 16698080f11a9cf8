//! The `[dnssec]` section of the config file.

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
        }
    }
}

impl DnssecConfig {
    /// The first problem with these settings, as (field, message).
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if !matches!(self.algorithm, 13 | 15) {
            return Some((
                "dnssec.algorithm",
                format!(
                    "{} is not supported (13 = ECDSA P-256, 15 = Ed25519)",
                    self.algorithm
                ),
            ));
        }
        match self.denial.as_str() {
            "nsec" | "nsec3" => {}
            other => {
                return Some((
                    "dnssec.denial",
                    format!("{other:?} is neither \"nsec\" nor \"nsec3\""),
                ))
            }
        }
        if self.nsec3_iterations != 0 {
            return Some((
                "dnssec.nsec3_iterations",
                "must be 0 (RFC 9276: extra iterations only cost the validators)".into(),
            ));
        }
        if !self.nsec3_salt.is_empty() && self.nsec3_salt != "-" {
            return Some((
                "dnssec.nsec3_salt",
                "must be empty (RFC 9276: a salt adds nothing)".into(),
            ));
        }
        if self.nsec3_opt_out && self.denial != "nsec3" {
            return Some((
                "dnssec.nsec3_opt_out",
                "needs denial = \"nsec3\" (NSEC has no opt-out)".into(),
            ));
        }
        if self.refresh_secs < MIN_REFRESH_SECS {
            return Some((
                "dnssec.refresh_secs",
                format!("must be at least {MIN_REFRESH_SECS} (a day is usual)"),
            ));
        }
        if self.signature_validity_secs < 3 * self.refresh_secs {
            return Some((
                "dnssec.signature_validity_secs",
                format!(
                    "must be at least 3 × refresh_secs ({}): a re-sign that is late, or a \
                     reload refused, must not let signatures expire",
                    self.refresh_secs
                ),
            ));
        }
        for zone in &self.zones {
            if !zone.ends_with('.') {
                return Some((
                    "dnssec.zones",
                    format!("{zone:?} must be absolute (end with a dot)"),
                ));
            }
        }
        None
    }

    /// Is `zone` (absolute, any case) one to sign?
    pub fn signs(&self, zone: &str) -> bool {
        self.zones.iter().any(|z| z.eq_ignore_ascii_case(zone))
    }
}
