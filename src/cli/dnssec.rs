//! `steerdns dnssec …`: make keys, print DS records, show key states, dump a signed zone.

use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use steerdns::config::Config;
use steerdns::dnssec::keys::{generate, load_zone_keys, normalize_zone, Timing};
use steerdns::dnssec::{Algorithm, Role};
use steerdns::snapshot::load::load;
use steerdns::zone::model::name_to_wire;

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `dnssec keygen ZONE`: a CSK (or, with `split`, a KSK and a ZSK), published and active now.
pub fn keygen(config: &Config, zone: &str, split: bool, algorithm: Option<u8>) -> Result<ExitCode> {
    let number = algorithm.unwrap_or(config.dnssec.algorithm);
    let Some(algorithm) = Algorithm::from_number(number) else {
        bail!("algorithm {number} is not supported (13 = ECDSA P-256, 15 = Ed25519)");
    };
    let now = now();
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
        let key = generate(&config.dnssec.keys, zone, algorithm, role, timing)?;
        println!(
            "wrote {} ({} {}, algorithm {}, tag {})",
            key.path.display(),
            key.zone,
            role.as_str(),
            algorithm.number(),
            key.tag
        );
    }
    let (seed, made) = steerdns::dnssec::rollover::ensure_seed(&config.dnssec.keys)?;
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

/// `dnssec ds ZONE`: the DS of every key-signing key the parent should have, zone-file form.
pub fn ds(config: &Config, zone: &str) -> Result<ExitCode> {
    let zone = normalize_zone(zone);
    let keys = load_zone_keys(&config.dnssec.keys, &zone)?;
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

/// `dnssec status`: every signed zone's keys, their states and next events.
pub fn status(config: &Config) -> Result<ExitCode> {
    if config.dnssec.zones.is_empty() {
        println!("DNSSEC off: no zones in [dnssec] zones");
        return Ok(ExitCode::SUCCESS);
    }
    let now = now();
    let window = steerdns::dnssec::Window::at(
        now,
        config.dnssec.signature_validity_secs,
        config.dnssec.refresh_secs,
    );
    println!(
        "key directory {}; algorithm {}; denial {}; signatures valid until {} (re-signed at {})",
        config.dnssec.keys.display(),
        config.dnssec.algorithm,
        config.dnssec.denial,
        rfc3339(u64::from(window.expiration)),
        rfc3339(window.refresh_at)
    );
    let mut bad = false;
    for zone in &config.dnssec.zones {
        let zone = normalize_zone(zone);
        match load_zone_keys(&config.dnssec.keys, &zone) {
            Err(e) => {
                bad = true;
                println!("{zone}: {e}");
            }
            Ok(keys) => {
                println!("{zone}:");
                for key in &keys {
                    let t = &key.timing;
                    let state = t.state(now);
                    // A key with a lifetime and no rollover under way: when the next starts.
                    let rollover =
                        steerdns::dnssec::rollover::next_start(key.role, t, &config.dnssec, now)
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
            }
        }
    }
    Ok(if bad {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
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
