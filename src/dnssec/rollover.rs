//! Automatic key rollover, driven by the configured lifetimes (`zsk_lifetime_secs`,
//! `ksk_lifetime_secs`): when a key's time is up, a successor is made and both keys' timings
//! are written to their key files, so a restarted server resumes where it was.
//!
//! - ZSK: pre-publish (RFC 6781 §4.1.1.1). The successor is in the DNSKEY RRset for the DNSKEY
//!   TTL plus the propagation delay before it signs; the old key then stops signing and stays
//!   published until its signatures have left every cache (the zone's largest TTL plus the
//!   propagation delay).
//! - KSK and CSK: double-DS (RFC 7583 §3.3.2) with CDS/CDNSKEY (RFC 7344). The successor is
//!   published and both keys are in CDS/CDNSKEY, so a parent that follows CDS publishes both
//!   DS; after the larger of the DNSKEY TTL and the parent's DS TTL plus the propagation delay
//!   the successor signs and the old key leaves CDS, then the DNSKEY RRset once what it signed
//!   has expired from caches.
//!
//! Fleet: every node computes the same plan. The start is derived from the old key's
//! activation and lifetime and aligned to the refresh period, and the successor's private key
//! is derived (HMAC-SHA-256) from the key directory's rollover seed (`rollover.seed`, made by
//! `steerdns dnssec keygen`, 0600, shipped with the keys), the zone, the old key and the start:
//! nodes that roll independently make byte-identical successors with identical timings.
//!
//! Algorithm: a rollover keeps the old key's algorithm, whatever `algorithm` says. Changing a
//! zone's algorithm is an algorithm rollover (RFC 6781 §4.1.4, RFC 7583 §3.1.5): the new
//! algorithm's signatures must be in caches before its DNSKEY, and its DS at the parent only
//! after that, a sequence steerdns does not carry out. Rolling to a key of the configured,
//! different algorithm as if it were an ordinary rollover would retire the old algorithm's
//! key while validators still hold RRsets signed only with it; so a zone whose keys differ
//! from its configured algorithm keeps its keys' algorithm, and [`algorithm_mismatch`] says
//! so (a load warning, `steerdns dnssec status`, `/v1/status`).
//!
//! [`plan`] is pure; [`apply`] writes the key files.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use p256::pkcs8::EncodePrivateKey;

use super::keys::{Algorithm, Key, KeyError, Role, Timing};
use super::settings::ZoneSettings;

/// The seed file's name in the key directory.
pub const SEED_FILE: &str = "rollover.seed";

/// How long a rollover waits: before the successor signs, and after the old key stops
/// signing before it leaves the DNSKEY RRset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Intervals {
    pub publish: u64,
    pub retire: u64,
}

/// The waits of a rollover of a `role` key, in a zone whose largest TTL is `max_zone_ttl`.
pub fn intervals(role: Role, settings: &ZoneSettings, max_zone_ttl: u32) -> Intervals {
    let propagation = settings.propagation_delay_secs;
    let dnskey = u64::from(settings.dnskey_ttl);
    let ds = u64::from(settings.parent_ds_ttl);
    let zone = u64::from(max_zone_ttl).max(dnskey);
    match role {
        Role::Zsk => Intervals {
            publish: dnskey + propagation,
            retire: zone + propagation,
        },
        Role::Ksk => Intervals {
            publish: dnskey.max(ds) + propagation,
            retire: dnskey + propagation,
        },
        Role::Csk => Intervals {
            publish: dnskey.max(ds) + propagation,
            retire: zone + propagation,
        },
    }
}

/// The configured lifetime of a `role` key (0: never rolled).
pub fn lifetime(role: Role, settings: &ZoneSettings) -> u64 {
    match role {
        Role::Zsk => settings.zsk_lifetime_secs,
        Role::Ksk | Role::Csk => settings.ksk_lifetime_secs,
    }
}

/// When the rollover of a key with `timing` is due (`None`: never, or under way already).
pub fn due_at(
    role: Role,
    timing: &Timing,
    settings: &ZoneSettings,
    max_zone_ttl: u32,
) -> Option<u64> {
    let life = lifetime(role, settings);
    if life == 0 || timing.retire.is_some() || timing.remove.is_some() {
        return None;
    }
    let publish = intervals(role, settings, max_zone_ttl).publish;
    Some(
        (timing.activate + life)
            .saturating_sub(publish)
            .max(timing.activate),
    )
}

/// When the next rollover of a key with `timing` starts, as seen at `now` (`None`: never, or
/// under way already): what [`plan`] will choose (the publication wait it works back from
/// does not depend on the zone's TTLs).
pub fn next_start(role: Role, timing: &Timing, settings: &ZoneSettings, now: u64) -> Option<u64> {
    due_at(role, timing, settings, 0).map(|due| align_up(due.max(now), settings.refresh_secs))
}

/// When `keys` (one zone's) hold keys that are not yet removed at `now` and whose algorithm
/// is not the one `settings` configure: the message saying what steerdns does about it (it
/// keeps them, and rolls them over to keys of their own algorithm; see the module doc).
pub fn algorithm_mismatch(keys: &[Key], settings: &ZoneSettings, now: u64) -> Option<String> {
    let configured = settings.algorithm;
    let others = keys_of_another_algorithm(keys, configured, now);
    let first = others.first()?;
    let zone = &first.zone;
    let mut algorithms: Vec<String> = others.iter().map(|k| k.algorithm.describe()).collect();
    algorithms.sort();
    algorithms.dedup();
    let field = &settings.algorithm_field;
    Some(format!(
        "{zone}: {field} is {} but its keys {} in {} are algorithm {}: steerdns keeps signing \
         with them and rolls them over to keys of their own algorithm, never to {field} \
         (changing a zone's algorithm is an algorithm rollover, RFC 6781 §4.1.4, which it does \
         not carry out); set {field} = {} to match the keys, or see \"Changing the algorithm\" \
         in the README",
        configured.describe(),
        role_and_tag_list(&others),
        settings.keys.display(),
        algorithms.join(" and "),
        first.algorithm.number(),
    ))
}

/// The keys (of one zone) not yet removed at `now` whose algorithm is not `algorithm`.
pub fn keys_of_another_algorithm(keys: &[Key], algorithm: Algorithm, now: u64) -> Vec<&Key> {
    keys.iter()
        .filter(|k| !k.timing.removed(now) && k.algorithm != algorithm)
        .collect()
}

/// `ksk 12345, zsk 23456`: keys as messages name them.
pub fn role_and_tag_list(keys: &[&Key]) -> String {
    let listed: Vec<String> = keys
        .iter()
        .map(|k| format!("{} {}", k.role.as_str(), k.tag))
        .collect();
    listed.join(", ")
}

/// One rollover to make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Roll {
    pub zone: String,
    pub old_tag: u16,
    pub role: Role,
    pub algorithm: Algorithm,
    /// The old key's new retire and remove times.
    pub retire: u64,
    pub remove: u64,
    /// The successor's timing.
    pub successor: Timing,
}

fn align_up(t: u64, period: u64) -> u64 {
    let period = period.max(1);
    t.div_ceil(period) * period
}

/// The rollovers due at `now` among `keys` (one zone's, signed with `settings`).
pub fn plan(keys: &[Key], settings: &ZoneSettings, max_zone_ttl: u32, now: u64) -> Vec<Roll> {
    let mut rolls = Vec::new();
    for key in keys.iter().filter(|k| k.timing.active(now)) {
        let Some(due) = due_at(key.role, &key.timing, settings, max_zone_ttl) else {
            continue;
        };
        if due > now {
            continue;
        }
        // Nodes that look within the same refresh period choose the same start.
        let start = align_up(due.max(now), settings.refresh_secs);
        let waits = intervals(key.role, settings, max_zone_ttl);
        let activate = start + waits.publish;
        rolls.push(Roll {
            zone: key.zone.clone(),
            old_tag: key.tag,
            role: key.role,
            algorithm: key.algorithm,
            retire: activate,
            remove: activate + waits.retire,
            successor: Timing {
                created: start,
                publish: start,
                activate,
                retire: None,
                remove: None,
            },
        });
    }
    rolls
}

/// Reads the rollover seed of `dir`.
fn read_seed(dir: &Path) -> Result<Vec<u8>, KeyError> {
    let path = dir.join(SEED_FILE);
    let meta = std::fs::metadata(&path).map_err(|source| KeyError::Read {
        path: path.clone(),
        source,
    })?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Permissions { path, mode });
    }
    let text = crate::files::read_text_limited(&path, crate::files::SMALL_FILE_LIMIT).map_err(
        |source| KeyError::Read {
            path: path.clone(),
            source,
        },
    )?;
    let seed = data_encoding::BASE64
        .decode(text.trim().as_bytes())
        .map_err(|e| KeyError::Bad {
            path: path.clone(),
            message: format!("not base64: {e}"),
        })?;
    if seed.len() < 32 {
        return Err(KeyError::Bad {
            path,
            message: "shorter than 32 bytes".into(),
        });
    }
    Ok(seed)
}

/// Replaces the key directory's rollover seed with 32 fresh random bytes (base64, 0600,
/// atomically): successors made from now on derive from it, so whoever saw the old seed
/// cannot compute them. Keys already made are files and stay as they are. Every node of a
/// fleet needs the new file before the next rollover starts, or nodes would make different
/// successors. Returns its path.
pub fn rotate_seed(dir: &Path) -> Result<PathBuf, KeyError> {
    let path = dir.join(SEED_FILE);
    let text = format!("{}\n", data_encoding::BASE64.encode(&random_seed()?));
    crate::files::replace_private_file(&path, text.as_bytes()).map_err(|e| KeyError::Write {
        path: path.clone(),
        source: std::io::Error::other(e.to_string()),
    })?;
    Ok(path)
}

fn random_seed() -> Result<[u8; 32], KeyError> {
    let mut seed = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut seed)
        .map_err(|e| KeyError::Crypto(e.to_string()))?;
    Ok(seed)
}

/// Makes the key directory's rollover seed if it has none (32 random bytes, base64, 0600).
/// Returns its path and whether it was made now.
pub fn ensure_seed(dir: &Path) -> Result<(PathBuf, bool), KeyError> {
    let path = dir.join(SEED_FILE);
    if path.exists() {
        return Ok((path, false));
    }
    let text = format!("{}\n", data_encoding::BASE64.encode(&random_seed()?));
    let write = || -> std::io::Result<()> {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        out.write_all(text.as_bytes())?;
        out.sync_all()
    };
    write().map_err(|source| KeyError::Write {
        path: path.clone(),
        source,
    })?;
    Ok((path, true))
}

/// The successor's PKCS#8 private key, derived from the seed and the roll.
fn derive_pkcs8(seed: &[u8], roll: &Roll) -> Result<Vec<u8>, KeyError> {
    let hmac = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, seed);
    for counter in 0u8..=255 {
        let mut input = b"steerdns rollover\0".to_vec();
        input.extend_from_slice(roll.zone.as_bytes());
        input.push(0);
        input.extend_from_slice(roll.role.as_str().as_bytes());
        input.push(roll.algorithm.number());
        input.extend_from_slice(&roll.old_tag.to_be_bytes());
        input.extend_from_slice(&roll.successor.created.to_be_bytes());
        input.push(counter);
        let material = ring::hmac::sign(&hmac, &input);
        let material = material.as_ref();
        match roll.algorithm {
            Algorithm::EcdsaP256Sha256 => {
                // Out of range for the curve once in ~2^32: the next counter.
                let Ok(secret) = p256::SecretKey::from_slice(material) else {
                    continue;
                };
                let der = secret
                    .to_pkcs8_der()
                    .map_err(|e| KeyError::Crypto(e.to_string()))?;
                return Ok(der.as_bytes().to_vec());
            }
            Algorithm::Ed25519 => {
                // PKCS#8 v1 of an Ed25519 seed (RFC 8410).
                let mut der = vec![
                    0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04,
                    0x22, 0x04, 0x20,
                ];
                der.extend_from_slice(material);
                return Ok(der);
            }
        }
    }
    Err(KeyError::Crypto("no usable successor key".into()))
}

/// Carries out `rolls` in `dir`: writes each successor (unless a node sharing the directory
/// already did) and the old key's new timing. Returns one line per roll.
pub fn apply(dir: &Path, keys: &mut [Key], rolls: &[Roll]) -> Result<Vec<String>, KeyError> {
    if rolls.is_empty() {
        return Ok(Vec::new());
    }
    let seed = read_seed(dir)?;
    let mut done = Vec::new();
    for roll in rolls {
        let pkcs8 = derive_pkcs8(&seed, roll)?;
        let successor = super::keys::from_parts(
            dir,
            &roll.zone,
            roll.algorithm,
            roll.role,
            pkcs8,
            roll.successor,
        )?;
        if !successor.path.exists() {
            successor.save()?;
        }
        if let Some(old) = keys
            .iter_mut()
            .find(|k| k.zone == roll.zone && k.tag == roll.old_tag)
        {
            old.timing.retire = Some(roll.retire);
            old.timing.remove = Some(roll.remove);
            old.save()?;
        }
        done.push(format!(
            "{} {} {} rolls to {}: {} publishes at {}, signs from {}; {} retires then, leaves at {}",
            roll.zone,
            roll.role.as_str(),
            roll.old_tag,
            successor.tag,
            successor.tag,
            roll.successor.publish,
            roll.successor.activate,
            roll.old_tag,
            roll.remove
        ));
    }
    Ok(done)
}

/// Moves the files of keys removed before `now` aside (`….toml.removed`), so the directory
/// does not grow with every rollover. Returns the paths moved.
pub fn retire_files(keys: &[Key], now: u64) -> Vec<PathBuf> {
    let mut moved = Vec::new();
    for key in keys {
        if key.timing.remove.is_some_and(|r| r <= now) {
            let to = key.path.with_extension("toml.removed");
            if std::fs::rename(&key.path, &to).is_ok() {
                moved.push(to);
            }
        }
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> ZoneSettings {
        let section = super::super::DnssecConfig {
            zsk_lifetime_secs: 1000,
            ksk_lifetime_secs: 5000,
            dnskey_ttl: 60,
            parent_ds_ttl: 300,
            propagation_delay_secs: 10,
            refresh_secs: 20,
            signature_validity_secs: 60,
            ..super::super::DnssecConfig::default()
        };
        ZoneSettings::for_zone(&section, "example.org.").expect("valid settings")
    }

    #[test]
    fn waits_respect_ttls_and_propagation() {
        let c = config();
        assert_eq!(
            intervals(Role::Zsk, &c, 3600),
            Intervals {
                publish: 70,
                retire: 3610
            }
        );
        assert_eq!(
            intervals(Role::Ksk, &c, 3600),
            Intervals {
                publish: 310,
                retire: 70
            }
        );
        assert_eq!(
            intervals(Role::Csk, &c, 30),
            Intervals {
                publish: 310,
                retire: 70
            }
        );
        let t = active_since(100);
        assert_eq!(due_at(Role::Zsk, &t, &c, 3600), Some(100 + 1000 - 70));
        assert_eq!(due_at(Role::Csk, &t, &c, 3600), Some(100 + 5000 - 310));
        let rolling = Timing {
            retire: Some(2000),
            ..t
        };
        assert_eq!(due_at(Role::Zsk, &rolling, &c, 3600), None);
        let never = ZoneSettings {
            zsk_lifetime_secs: 0,
            ..c.clone()
        };
        assert_eq!(due_at(Role::Zsk, &t, &never, 3600), None);
    }

    /// A key created, published and active at `t`, with no retirement planned.
    fn active_since(t: u64) -> Timing {
        Timing {
            created: t,
            publish: t,
            activate: t,
            retire: None,
            remove: None,
        }
    }

    /// A fresh key directory for this test process, with its rollover seed.
    fn seeded_key_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        ensure_seed(&dir).expect("seed");
        dir
    }

    #[test]
    fn nodes_rolling_apart_make_the_same_successor() {
        let dir = seeded_key_dir("steerdns-roll");
        let c = config();
        let t = active_since(100);
        for algorithm in [Algorithm::EcdsaP256Sha256, Algorithm::Ed25519] {
            let key = super::super::keys::generate(&dir, "example.org.", algorithm, Role::Zsk, t)
                .expect("keygen");
            let keys = vec![key];
            assert!(plan(&keys, &c, 3600, 500).is_empty(), "not yet");
            // Two nodes waking a few seconds apart in the same refresh period.
            let a = plan(&keys, &c, 3600, 1031);
            let b = plan(&keys, &c, 3600, 1035);
            assert_eq!(a, b);
            assert_eq!(a.len(), 1);
            assert_eq!(a[0].successor.publish, 1040);
            assert_eq!(a[0].successor.activate, 1040 + 70);
            assert_eq!((a[0].retire, a[0].remove), (1110, 1110 + 3610));
            let seed = read_seed(&dir).expect("seed");
            assert_eq!(
                derive_pkcs8(&seed, &a[0]).expect("derive"),
                derive_pkcs8(&seed, &b[0]).expect("derive")
            );
            let mut keys = keys;
            let lines = apply(&dir, &mut keys, &a).expect("apply");
            assert_eq!(lines.len(), 1);
            let all = super::super::keys::load_zone_keys(&dir, "example.org.").expect("load");
            let old = all.iter().find(|k| k.tag == keys[0].tag).expect("old key");
            assert_eq!(old.timing.retire, Some(1110));
            assert!(all
                .iter()
                .any(|k| k.tag != old.tag && k.timing.activate == 1110));
            // Done again (another node, or a restart): nothing new.
            assert!(plan(&all, &c, 3600, 1036).is_empty());
            for k in &all {
                let _ = std::fs::remove_file(&k.path);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Whoever saw a seed can compute the successors it derives; after `rotate_seed` the next
    /// successor is another key, still the same on every node given the new file, and the
    /// keys already made stay as they are.
    #[test]
    fn a_rotated_seed_makes_other_successors_alike_on_every_node() {
        let dir = seeded_key_dir("steerdns-roll-rotate");
        let c = config();
        let key = super::super::keys::generate(
            &dir,
            "example.org.",
            Algorithm::Ed25519,
            Role::Zsk,
            active_since(100),
        )
        .expect("keygen");
        let rolls = plan(std::slice::from_ref(&key), &c, 3600, 1031);
        assert_eq!(rolls.len(), 1);
        let old_seed = read_seed(&dir).expect("seed");
        let from_old = derive_pkcs8(&old_seed, &rolls[0]).expect("derive");
        let path = rotate_seed(&dir).expect("rotate");
        let mode = std::fs::metadata(&path).expect("seed").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let new_seed = read_seed(&dir).expect("new seed");
        assert_ne!(new_seed, old_seed);
        // Another node with the new file.
        let other = seeded_key_dir("steerdns-roll-rotate-other");
        std::fs::copy(&path, other.join(SEED_FILE)).expect("ship the seed");
        let there_path = other.join(key.path.file_name().expect("file name"));
        std::fs::copy(&key.path, &there_path).expect("the old key on the other node");
        let read = |path: &Path| super::super::keys::read_key(path).expect("read key");
        apply(&dir, &mut [read(&key.path)], &rolls).expect("apply");
        apply(&other, &mut [read(&there_path)], &rolls).expect("apply there");
        let successor = |dir: &Path| {
            super::super::keys::load_zone_keys(dir, "example.org.")
                .expect("load")
                .into_iter()
                .find(|k| k.tag != key.tag)
                .expect("a successor")
        };
        let (a, b) = (successor(&dir), successor(&other));
        assert_eq!(
            (a.tag, a.dnskey_rdata()),
            (b.tag, b.dnskey_rdata()),
            "alike"
        );
        let derived_old = super::super::keys::from_parts(
            &dir,
            "example.org.",
            Algorithm::Ed25519,
            Role::Zsk,
            from_old,
            rolls[0].successor,
        )
        .expect("the old seed's successor");
        assert_ne!(
            a.dnskey_rdata(),
            derived_old.dnskey_rdata(),
            "not the old seed's"
        );
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&other);
    }

    #[test]
    fn keys_of_another_algorithm_are_kept_said_and_rolled_to_their_own() {
        let dir = seeded_key_dir("steerdns-roll-alg");
        // Configured Ed25519 (15) for the zone; its key directory holds ECDSA P-256 (13).
        let section = super::super::DnssecConfig {
            keys: dir.clone(),
            zones: vec!["example.org.".into()],
            zsk_lifetime_secs: 1000,
            dnskey_ttl: 60,
            propagation_delay_secs: 10,
            refresh_secs: 20,
            signature_validity_secs: 60,
            zone: [(
                "example.org.".to_string(),
                super::super::config::DnssecZoneOverrides {
                    algorithm: Some(15),
                    ..Default::default()
                },
            )]
            .into(),
            ..super::super::DnssecConfig::default()
        };
        let c = ZoneSettings::for_zone(&section, "example.org.").expect("valid settings");
        assert_eq!(c.algorithm, Algorithm::Ed25519);
        let t = active_since(100);
        let gen = |role| {
            super::super::keys::generate(&dir, "example.org.", Algorithm::EcdsaP256Sha256, role, t)
                .expect("keygen")
        };
        let mut keys = vec![gen(Role::Ksk), gen(Role::Zsk)];
        let note = algorithm_mismatch(&keys, &c, 500).expect("said");
        for part in [
            "example.org.: dnssec.zone.\"example.org.\".algorithm is 15 (Ed25519)",
            &format!("ksk {}, zsk {}", keys[0].tag, keys[1].tag),
            "are algorithm 13 (ECDSA P-256)",
            "keeps signing with them",
            "RFC 6781",
            "dnssec.zone.\"example.org.\".algorithm = 13",
        ] {
            assert!(note.contains(part), "{part:?} not in {note}");
        }
        // The rollover the ZSK's lifetime brings makes an algorithm-13 successor.
        let rolls = plan(&keys, &c, 3600, 1031);
        assert_eq!(rolls.len(), 1);
        assert_eq!(rolls[0].algorithm, Algorithm::EcdsaP256Sha256);
        apply(&dir, &mut keys, &rolls).expect("apply");
        let all = super::super::keys::load_zone_keys(&dir, "example.org.").expect("load");
        assert_eq!(all.len(), 3);
        assert!(all
            .iter()
            .all(|k| k.algorithm == Algorithm::EcdsaP256Sha256));
        // Keys of the configured algorithm: nothing to say.
        let matching = ZoneSettings {
            algorithm: Algorithm::EcdsaP256Sha256,
            ..c.clone()
        };
        assert_eq!(algorithm_mismatch(&all, &matching, 500), None);
        // A removed key of another algorithm (an algorithm change done by hand) is not one.
        let mut ed =
            super::super::keys::generate(&dir, "example.org.", Algorithm::Ed25519, Role::Csk, t)
                .expect("keygen");
        ed.timing.retire = Some(200);
        ed.timing.remove = Some(300);
        assert_eq!(algorithm_mismatch(&[ed], &matching, 500), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The DS RDATA of the CDS records at the apex of a signed `zone`.
    fn served_cds(zone: &crate::zone::model::Zone) -> Vec<Vec<u8>> {
        let apex = zone.nodes.get(&zone.apex).expect("apex");
        apex.rrsets
            .iter()
            .filter(|s| s.rtype == crate::dns::wire::rtype::CDS)
            // type, class, TTL, RDLENGTH, then the RDATA.
            .flat_map(|s| s.records().map(|r| r[10..].to_vec()).collect::<Vec<_>>())
            .collect()
    }

    #[test]
    fn a_csk_rollover_never_leaves_the_cds_set_empty_at_any_second() {
        use super::super::zone::{parent_keys, sign_zone, SteeredTypes};
        // The integration test's child (tests/control/dnssec_unbound.rs): a CSK living 20 s, DNSKEY and
        // DS TTLs of 2 s, 4 s of propagation, a 2-second refresh period.
        let settings_in = |dir: &Path| {
            let section = super::super::DnssecConfig {
                keys: dir.to_path_buf(),
                zones: vec!["example.com.".into()],
                refresh_secs: 2,
                signature_validity_secs: 60,
                ksk_lifetime_secs: 20,
                dnskey_ttl: 2,
                parent_ds_ttl: 2,
                propagation_delay_secs: 4,
                ..super::super::DnssecConfig::default()
            };
            ZoneSettings::for_zone(&section, "example.com.").expect("valid settings")
        };
        let text = "$TTL 3\n@ IN SOA ns1 h 1 2 3 4 5\n@ IN NS ns1\nns1 IN A 192.0.2.1\n\
                    mail IN A 192.0.2.2\n";
        let t0: u64 = 1_700_000_001;
        // The re-signing thread plans rollovers when it wakes: every second, or late (under
        // load) every `lag` seconds. Whatever reloads the snapshot at second `now` (the
        // re-signing thread after its plan, a SIGHUP, a config change) reads the key files as
        // they are then and signs with the key states at that same `now`: what it serves until
        // the next reload is the CDS set of that moment. So every (`lag`, `now`) is checked.
        for lag in [1u64, 2, 3, 5, 7] {
            let dir = seeded_key_dir(&format!("steerdns-roll-cds-{lag}"));
            let settings = settings_in(&dir);
            let first = Timing {
                created: t0,
                publish: t0,
                activate: t0,
                retire: None,
                remove: None,
            };
            super::super::keys::generate(
                &dir,
                "example.com.",
                Algorithm::Ed25519,
                Role::Csk,
                first,
            )
            .expect("keygen");
            let mut max_ttl = 0;
            let mut successors = std::collections::BTreeSet::new();
            let mut double_ds_seconds = 0;
            let mut previous: Option<Vec<Vec<u8>>> = None;
            for now in t0..t0 + 150 {
                if (now - t0).is_multiple_of(lag) {
                    let mut keys =
                        super::super::keys::load_zone_keys(&dir, "example.com.").expect("load");
                    let rolls = plan(&keys, &settings, max_ttl, now);
                    apply(&dir, &mut keys, &rolls).expect("apply");
                    retire_files(&keys, now);
                }
                let keys = super::super::keys::load_zone_keys(&dir, "example.com.").expect("load");
                let states: Vec<String> = keys
                    .iter()
                    .map(|k| format!("{} {} {:?}", k.tag, k.timing.state(now), k.timing))
                    .collect();
                let mut zone = crate::zone::model::example_zone(text);
                let signed = sign_zone(
                    &mut zone,
                    &keys,
                    &settings,
                    &settings.window(now),
                    now,
                    &|_| SteeredTypes::default(),
                )
                .unwrap_or_else(|e| panic!("lag {lag}, at t0+{}: {e}; {states:#?}", now - t0));
                max_ttl = signed.max_ttl;
                let cds = served_cds(&zone);
                assert!(
                    !cds.is_empty(),
                    "lag {lag}, at t0+{}: no CDS; keys {states:#?}",
                    now - t0
                );
                let expected: Vec<Vec<u8>> = parent_keys(&keys, now)
                    .iter()
                    .map(|k| k.ds_rdata(&zone.apex))
                    .collect();
                assert_eq!(cds, expected, "lag {lag}, at t0+{}", now - t0);
                // The key signing the DNSKEY RRset is always one the parent has (or is told
                // to have) a DS for.
                assert!(
                    signed
                        .key_signing
                        .iter()
                        .all(|tag| parent_keys(&keys, now).iter().any(|k| k.tag == *tag)),
                    "lag {lag}, at t0+{}: signing keys {:?}; {states:#?}",
                    now - t0,
                    signed.key_signing
                );
                // A parent following CDS moves one key at a time: each change adds or drops.
                if let Some(before) = &previous {
                    if *before != cds {
                        let kept = cds.iter().filter(|d| before.contains(d)).count();
                        assert!(
                            kept >= 1,
                            "lag {lag}, at t0+{}: CDS replaced whole",
                            now - t0
                        );
                    }
                }
                if cds.len() == 2 {
                    double_ds_seconds += 1;
                }
                successors.extend(keys.iter().map(|k| k.tag));
                previous = Some(cds);
            }
            // Not vacuous: the 150 seconds held several rollovers, each with a double-DS phase.
            assert!(successors.len() >= 5, "lag {lag}: keys {successors:?}");
            assert!(double_ds_seconds >= 4 * 6, "lag {lag}: {double_ds_seconds}");
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
}
