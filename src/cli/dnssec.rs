//! `steerdns dnssec …`: make keys, print DS records, show key states, dump a signed zone.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use steerdns::config::Config;
use steerdns::dnssec::keys::{generate, load_zone_keys, normalize_zone, Timing};
use steerdns::dnssec::rollover::{keys_of_another_algorithm, role_and_tag_list};
use steerdns::dnssec::{Algorithm, Role, ZoneSettings};
use steerdns::snapshot::load::load;
use steerdns::zone::model::name_to_wire;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The settings `zone` is signed with (its `[dnssec.zone."…"]` overrides over `[dnssec]`).
fn zone_settings(config: &Config, zone: &str) -> Result<ZoneSettings> {
    Ok(ZoneSettings::for_zone(
        &config.dnssec,
        &normalize_zone(zone),
    )?)
}

/// `dnssec rotate-seed ZONE`: a fresh rollover seed in the zone's key directory.
pub fn rotate_seed(config: &Config, zone: &str) -> Result<ExitCode> {
    let settings = zone_settings(config, zone)?;
    let path = steerdns::dnssec::rollover::rotate_seed(&settings.keys)
        .with_context(|| format!("rotating the rollover seed of {}", settings.keys.display()))?;
    println!(
        "{}: new rollover seed; successors made from now on derive from it (keys already made \
         stay). Copy it to every node before the next rollover starts (`steerdns dnssec status`).",
        path.display()
    );
    Ok(ExitCode::SUCCESS)
}

/// `dnssec keygen ZONE`: a CSK (or, with `split`, a KSK and a ZSK), published and active now,
/// in the zone's key directory, of the zone's algorithm unless `algorithm` says otherwise.
pub fn keygen(config: &Config, zone: &str, split: bool, algorithm: Option<u8>) -> Result<ExitCode> {
    let settings = zone_settings(config, zone)?;
    let algorithm = match algorithm {
        None => settings.algorithm,
        Some(number) => match Algorithm::from_number(number) {
            Some(algorithm) => algorithm,
            None => bail!("algorithm {number} is not supported (13 = ECDSA P-256, 15 = Ed25519)"),
        },
    };
    let now = now();
    refuse_algorithm_change(&settings, zone, algorithm, now)?;
    let timing = Timing {
        created: now,
        publish: now,
        activate: now,
        retire: None,
        remove: None,
    };
    let roles: &[Role] = if split {
        &[Role::Ksk, Role::Zsk]
    } else {
        &[Role::Csk]
    };
    for &role in roles {
        let key = generate(&settings.keys, zone, algorithm, role, timing)?;
        println!(
            "wrote {} ({} {}, algorithm {}, tag {})",
            key.path.display(),
            key.zone,
            role.as_str(),
            algorithm.number(),
            key.tag
        );
    }
    let (seed, made) = steerdns::dnssec::rollover::ensure_seed(&settings.keys)?;
    if made {
        println!(
            "wrote {} (automatic rollover derives successor keys from it: ship it with the keys)",
            seed.display()
        );
    }
    if !config.dnssec.signs(&normalize_zone(zone)) {
        eprintln!(
            "note: {} is not in [dnssec] zones yet; add it there to sign the zone",
            normalize_zone(zone)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses a key of `algorithm` for a zone that has keys (not yet removed) of another: that
/// key, published and signing at once and listed in CDS, would start an algorithm rollover
/// without its sequence (RFC 6781 §4.1.4: the new algorithm's signatures in caches before its
/// DNSKEY, its DS at the parent only after), which steerdns does not carry out.
fn refuse_algorithm_change(
    settings: &ZoneSettings,
    zone: &str,
    algorithm: Algorithm,
    now: u64,
) -> Result<()> {
    let zone = normalize_zone(zone);
    // No key yet (or no directory): nothing to change from. An unreadable key file is for
    // `dnssec status` and the server to report; it does not hide the others here.
    let Ok(keys) = load_zone_keys(&settings.keys, &zone) else {
        return Ok(());
    };
    let others = keys_of_another_algorithm(&keys, algorithm, now);
    let Some(existing) = others.first() else {
        return Ok(());
    };
    bail!(
        "{zone} has keys of algorithm {} in {} ({}): a new key of algorithm {} would start an \
         algorithm rollover, which steerdns does not carry out (RFC 6781 §4.1.4: the new \
         algorithm's signatures must reach caches before its DNSKEY, and its DS the parent \
         after that). Keep algorithm {} (pass --algorithm {}, and set {} = {} so that the \
         server agrees), or change algorithms as the README's \"Changing the algorithm\" says",
        existing.algorithm.describe(),
        settings.keys.display(),
        role_and_tag_list(&others),
        algorithm.describe(),
        existing.algorithm.number(),
        existing.algorithm.number(),
        settings.algorithm_field,
        existing.algorithm.number(),
    )
}

/// `dnssec ds ZONE`: the DS of every key-signing key the parent should have, zone-file form.
pub fn ds(config: &Config, zone: &str) -> Result<ExitCode> {
    let settings = zone_settings(config, zone)?;
    let zone = normalize_zone(zone);
    let keys = load_zone_keys(&settings.keys, &zone)?;
    let apex = name_to_wire(&zone.parse().context("zone name")?);
    let now = now();
    let mut printed = 0;
    for key in keys.iter().filter(|k| {
        k.role.signs_keys() && k.timing.published(now) && k.timing.retire.is_none_or(|r| now < r)
    }) {
        println!("{}", key.ds_text(&apex));
        printed += 1;
    }
    if printed == 0 {
        bail!(
            "{zone}: no published key-signing key (make one with `steerdns dnssec keygen {zone}`)"
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `dnssec status`: every signed zone's settings, keys, their states and next events.
pub fn status(config: &Config) -> Result<ExitCode> {
    if config.dnssec.zones.is_empty() {
        println!("DNSSEC off: no zones in [dnssec] zones");
        return Ok(ExitCode::SUCCESS);
    }
    let now = now();
    let mut bad = false;
    for zone in &config.dnssec.zones {
        let settings = zone_settings(config, zone)?;
        let zone = normalize_zone(zone);
        let window = settings.window(now);
        println!(
            "{zone}: key directory {}; algorithm {}; denial {}; signatures valid until {} \
             (re-signed at {})",
            settings.keys.display(),
            settings.algorithm.number(),
            settings.denial_name(),
            rfc3339(u64::from(window.expiration)),
            rfc3339(window.refresh_at)
        );
        match load_zone_keys(&settings.keys, &zone) {
            Err(e) => {
                bad = true;
                println!("  {e}");
            }
            Ok(keys) => {
                if let Some(note) =
                    steerdns::dnssec::rollover::algorithm_mismatch(&keys, &settings, now)
                {
                    println!("  warning: {note}");
                }
                for key in &keys {
                    print_key(key, &settings, now);
                }
            }
        }
    }
    Ok(if bad {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// One key's line of `dnssec status`: role, tag, algorithm, state and next event.
fn print_key(key: &steerdns::dnssec::Key, settings: &ZoneSettings, now: u64) {
    let t = &key.timing;
    let state = t.state(now);
    // A key with a lifetime and no rollover under way: when the next starts.
    let rollover = steerdns::dnssec::rollover::next_start(key.role, t, settings, now)
        .filter(|_| t.active(now))
        .map(|at| (at, "rollover starts"));
    let next = t
        .next_event(now)
        .or(rollover)
        .map_or("no event scheduled".to_string(), |(at, what)| {
            format!("{what} at {}", rfc3339(at))
        });
    println!(
        "  {} tag {:5} alg {} {:9} next: {next}  ({})",
        key.role.as_str(),
        key.tag,
        key.algorithm.number(),
        state,
        key.path.display()
    );
}

fn rfc3339(secs: u64) -> String {
    steerdns::rfc3339::format_utc(std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs))
}

/// `dnssec dump ZONE`: the signed zone as the server serves it, in zone-file form (each
/// steered name with one of its pre-signed answers per type), for an independent verifier.
pub fn dump(config: &Config, zone: &str) -> Result<ExitCode> {
    let zone = normalize_zone(zone);
    let loaded = load(config).map_err(|errors| anyhow::anyhow!("{}", errors.join("\n")))?;
    let compiled = loaded.compiled;
    let found = compiled
        .zones()
        .zones()
        .iter()
        .find(|z| z.origin.to_string().eq_ignore_ascii_case(&zone))
        .with_context(|| format!("{zone} is not a served zone"))?;
    let steered = compiled.dnssec().map(|d| &d.steered);
    let text = steerdns::dnssec::dump::zone_text(found, steered)
        .with_context(|| format!("{zone} is not signed (add it to [dnssec] zones)"))?;
    print!("{text}");
    Ok(ExitCode::SUCCESS)
}
