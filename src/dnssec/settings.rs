//! One zone's DNSSEC settings: the `[dnssec]` section's values under the zone's
//! `[dnssec.zone."NAME"]` overrides, checked and in the types that signing, rollover, the
//! re-signing thread and the CLI use. The config file's check runs the same resolution
//! ([`DnssecConfig::problem`]), so a config that loaded resolves for every zone it signs.

use std::path::PathBuf;

use super::config::{DnssecConfig, DnssecZoneOverrides, MIN_REFRESH_SECS};
use super::keys::Algorithm;
use super::sign::Window;

/// Authenticated denial of existence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Denial {
    Nsec,
    /// RFC 5155, with these parameters.
    Nsec3(Nsec3Params),
}

/// The NSEC3 parameters (RFC 9276: no salt and no extra iteration, the only ones accepted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nsec3Params {
    pub salt: Vec<u8>,
    pub iterations: u16,
    /// Unsigned delegations get no record of their own.
    pub opt_out: bool,
}

/// What one zone is signed with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSettings {
    /// The key directory (absolute once the config file's paths are resolved).
    pub keys: PathBuf,
    /// The algorithm of new keys (`dnssec keygen`); a rollover keeps the old key's, and a
    /// zone's keys of another algorithm are kept and reported
    /// ([`super::rollover::algorithm_mismatch`]).
    pub algorithm: Algorithm,
    /// The field `algorithm` was read from (`dnssec.algorithm`,
    /// `dnssec.zone."edge.example.net.".algorithm`), for messages.
    pub algorithm_field: String,
    pub denial: Denial,
    pub signature_validity_secs: u64,
    pub refresh_secs: u64,
    pub dnskey_ttl: u32,
    pub zsk_lifetime_secs: u64,
    pub ksk_lifetime_secs: u64,
    pub propagation_delay_secs: u64,
    pub parent_ds_ttl: u32,
}

/// A DNSSEC setting that cannot be used: the field as written in the config file
/// (`dnssec.denial`, `dnssec.zone."edge.example.net.".denial`) and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SettingsProblem {
    pub field: String,
    pub message: String,
}

impl ZoneSettings {
    /// The settings `zone` (absolute, any case) is signed with: its overrides, if any, over
    /// the section's values.
    pub fn for_zone(config: &DnssecConfig, zone: &str) -> Result<ZoneSettings, SettingsProblem> {
        resolve(config, config.overrides(zone))
    }

    /// The signature window at `now` (see [`Window::at`]).
    pub fn window(&self, now: u64) -> Window {
        Window::at(now, self.signature_validity_secs, self.refresh_secs)
    }

    /// `nsec` or `nsec3`, as configured.
    pub fn denial_name(&self) -> &'static str {
        match self.denial {
            Denial::Nsec => "nsec",
            Denial::Nsec3(_) => "nsec3",
        }
    }

    /// The NSEC3 parameters (`None` with NSEC).
    pub fn nsec3(&self) -> Option<&Nsec3Params> {
        match &self.denial {
            Denial::Nsec => None,
            Denial::Nsec3(params) => Some(params),
        }
    }
}

impl DnssecConfig {
    /// The first problem with these settings: the section's own values, the zone names, the
    /// override tables (each must name a zone of `zones`) and every zone's resolved settings.
    pub fn problem(&self) -> Option<SettingsProblem> {
        let problem = |field: String, message: String| Some(SettingsProblem { field, message });
        if let Err(problem) = resolve(self, None) {
            return Some(problem);
        }
        if let Some(zone) = self.zones.iter().find(|z| !z.ends_with('.')) {
            return problem(
                "dnssec.zones".into(),
                format!("{zone:?} must be absolute (end with a dot)"),
            );
        }
        let names: Vec<&String> = self.zone.keys().collect();
        for (i, name) in names.iter().enumerate() {
            let field = table_field(name);
            if !self.signs(name) {
                return problem(
                    field,
                    "names no zone of dnssec.zones (an override applies to a zone signed there)"
                        .into(),
                );
            }
            if let Some(other) = names[..i].iter().find(|o| o.eq_ignore_ascii_case(name)) {
                return problem(field, format!("the same zone as dnssec.zone.{other:?}"));
            }
        }
        self.zones
            .iter()
            .find_map(|zone| ZoneSettings::for_zone(self, zone).err())
    }
}

/// The field name of a zone's override table.
fn table_field(zone: &str) -> String {
    format!("dnssec.zone.{zone:?}")
}

/// The settings under `overrides` (the zone's table, as named in the config file), each
/// checked and reported by the field it was read from.
fn resolve(
    section: &DnssecConfig,
    overrides: Option<(&str, &DnssecZoneOverrides)>,
) -> Result<ZoneSettings, SettingsProblem> {
    let field = |name: &str, overridden: bool| match overrides {
        Some((zone, _)) if overridden => format!("{}.{name}", table_field(zone)),
        _ => format!("dnssec.{name}"),
    };
    // (value, field it came from): the zone's own value, else the section's.
    macro_rules! pick {
        ($name:ident) => {{
            let own = overrides.and_then(|(_, o)| o.$name.clone());
            let from = field(stringify!($name), own.is_some());
            (own.unwrap_or_else(|| section.$name.clone()), from)
        }};
    }
    let fail = |field: String, message: String| Err(SettingsProblem { field, message });
    let (number, algorithm_field) = pick!(algorithm);
    let Some(algorithm) = Algorithm::from_number(number) else {
        return fail(
            algorithm_field,
            format!("{number} is not supported (13 = ECDSA P-256, 15 = Ed25519)"),
        );
    };
    let (denial, denial_from) = pick!(denial);
    if !matches!(denial.as_str(), "nsec" | "nsec3") {
        return fail(
            denial_from,
            format!("{denial:?} is neither \"nsec\" nor \"nsec3\""),
        );
    }
    let (iterations, from) = pick!(nsec3_iterations);
    if iterations != 0 {
        return fail(
            from,
            "must be 0 (RFC 9276: extra iterations only cost the validators)".into(),
        );
    }
    let (salt, from) = pick!(nsec3_salt);
    if !salt.is_empty() && salt != "-" {
        return fail(from, "must be empty (RFC 9276: a salt adds nothing)".into());
    }
    let (opt_out, from) = pick!(nsec3_opt_out);
    let denial = if denial == "nsec3" {
        Denial::Nsec3(Nsec3Params {
            salt: Vec::new(),
            iterations,
            opt_out,
        })
    } else if opt_out {
        return fail(
            from,
            "needs denial = \"nsec3\" (NSEC has no opt-out)".into(),
        );
    } else {
        Denial::Nsec
    };
    let (refresh_secs, from) = pick!(refresh_secs);
    if refresh_secs < MIN_REFRESH_SECS {
        return fail(
            from,
            format!("must be at least {MIN_REFRESH_SECS} (a day is usual)"),
        );
    }
    let (signature_validity_secs, from) = pick!(signature_validity_secs);
    if signature_validity_secs < 3 * refresh_secs {
        return fail(
            from,
            format!(
                "must be at least 3 × refresh_secs ({refresh_secs}): a re-sign that is late, \
                 or a reload refused, must not let signatures expire"
            ),
        );
    }
    Ok(ZoneSettings {
        keys: pick!(keys).0,
        algorithm,
        algorithm_field,
        denial,
        signature_validity_secs,
        refresh_secs,
        dnskey_ttl: pick!(dnskey_ttl).0,
        zsk_lifetime_secs: pick!(zsk_lifetime_secs).0,
        ksk_lifetime_secs: pick!(ksk_lifetime_secs).0,
        propagation_delay_secs: pick!(propagation_delay_secs).0,
        parent_ds_ttl: pick!(parent_ds_ttl).0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<DnssecConfig, toml::de::Error> {
        toml::from_str(text)
    }

    const TWO_ZONES: &str = r#"
keys = "keys"
zones = ["example.com.", "edge.example.net."]
denial = "nsec"
signature_validity_secs = 1209600
[zone."edge.example.net."]
denial = "nsec3"
algorithm = 15
keys = "keys-edge"
signature_validity_secs = 604800
"#;

    #[test]
    fn a_zone_without_overrides_gets_the_section_and_one_with_them_its_own() {
        let config = parse(TWO_ZONES).expect("parses");
        assert_eq!(config.problem(), None);
        let plain = ZoneSettings::for_zone(&config, "example.com.").expect("resolves");
        assert_eq!(plain.keys, PathBuf::from("keys"));
        assert_eq!(plain.algorithm, Algorithm::EcdsaP256Sha256);
        assert_eq!(plain.denial, Denial::Nsec);
        assert_eq!(plain.signature_validity_secs, 1_209_600);
        let edge = ZoneSettings::for_zone(&config, "EDGE.example.net.").expect("resolves");
        assert_eq!(edge.keys, PathBuf::from("keys-edge"));
        assert_eq!(edge.algorithm, Algorithm::Ed25519);
        assert_eq!(
            edge.algorithm_field,
            "dnssec.zone.\"edge.example.net.\".algorithm"
        );
        assert_eq!(plain.algorithm_field, "dnssec.algorithm");
        assert_eq!(
            edge.denial,
            Denial::Nsec3(Nsec3Params {
                salt: Vec::new(),
                iterations: 0,
                opt_out: false
            })
        );
        assert_eq!(edge.signature_validity_secs, 604_800);
        // What it does not set is the section's.
        assert_eq!(edge.refresh_secs, plain.refresh_secs);
        assert_eq!(edge.dnskey_ttl, plain.dnskey_ttl);
        assert_eq!(edge.parent_ds_ttl, plain.parent_ds_ttl);
    }

    #[test]
    fn a_bad_value_is_reported_by_the_field_it_was_written_in() {
        let problem = |text: &str| {
            parse(text)
                .expect("parses")
                .problem()
                .map(|p| (p.field, p.message))
        };
        let zones = "zones = [\"example.com.\", \"edge.example.net.\"]\n";
        let (field, _) = problem(&format!(
            "{zones}[zone.\"edge.example.net.\"]\nalgorithm = 8\n"
        ))
        .expect("refused");
        assert_eq!(field, "dnssec.zone.\"edge.example.net.\".algorithm");
        let (field, _) =
            problem(&format!("{zones}algorithm = 8\n")).expect("the section's own value");
        assert_eq!(field, "dnssec.algorithm");
        // Opt-out set for the section, NSEC for one zone: the zone's denial is the culprit's
        // partner, the opt-out the field named (it is what NSEC cannot have).
        let (field, message) = problem(&format!(
            "{zones}denial = \"nsec3\"\nnsec3_opt_out = true\n[zone.\"example.com.\"]\ndenial = \"nsec\"\n"
        ))
        .expect("refused");
        assert_eq!(field, "dnssec.nsec3_opt_out");
        assert!(message.contains("nsec3"), "{message}");
        // A zone's validity too short for the section's refresh.
        let (field, message) = problem(&format!(
            "{zones}refresh_secs = 100\n[zone.\"example.com.\"]\nsignature_validity_secs = 200\n"
        ))
        .expect("refused");
        assert_eq!(
            field,
            "dnssec.zone.\"example.com.\".signature_validity_secs"
        );
        assert!(message.contains("3 × refresh_secs (100)"), "{message}");
        let (field, _) = problem(&format!(
            "{zones}[zone.\"example.com.\"]\nnsec3_salt = \"ab\"\n"
        ))
        .expect("refused");
        assert_eq!(field, "dnssec.zone.\"example.com.\".nsec3_salt");
    }

    #[test]
    fn an_override_must_name_a_zone_to_sign_once() {
        let config =
            parse("zones = [\"example.com.\"]\n[zone.\"example.org.\"]\ndenial = \"nsec3\"\n")
                .expect("parses");
        let problem = config.problem().expect("refused");
        assert_eq!(problem.field, "dnssec.zone.\"example.org.\"");
        assert!(problem.message.contains("dnssec.zones"), "{problem}");
        let config =
            parse("zones = [\"example.com.\"]\n[zone.\"example.com.\"]\n[zone.\"EXAMPLE.com.\"]\n")
                .expect("parses");
        let problem = config.problem().expect("refused");
        assert!(problem.message.contains("the same zone"), "{problem}");
    }

    #[test]
    fn unknown_override_fields_are_refused() {
        let error =
            parse("zones = [\"example.com.\"]\n[zone.\"example.com.\"]\ndenail = \"nsec3\"\n")
                .expect_err("unknown field");
        assert!(error.to_string().contains("denail"), "{error}");
    }
}
