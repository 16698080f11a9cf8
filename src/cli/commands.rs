//! The subcommands that run in-process and need no server: `check`, `simulate`, `taste`
//! (the taster child), `geoip` and `dnssec`.

use std::process::ExitCode;

use anyhow::{Context, Result};

use steerdns::config::Config;
use steerdns::reload::Source;
use steerdns::snapshot::load::load;

use super::args::{DnssecCommand, GeoipCommand, SimulateArgs, SourceArgs, TasteArgs};

pub fn read_config(args: &SourceArgs) -> Result<Config> {
    let source = Source {
        config: args.config.clone(),
        zones: args.zones.clone(),
        ..Source::default()
    };
    source.read_config().map_err(anyhow::Error::msg)
}

/// The taster child: loads the change the server is about to load and prints its verdict
/// (one JSON line). Run by the server only.
pub fn taste(args: TasteArgs) -> Result<ExitCode> {
    use std::io::Read;
    steerdns::taster::apply_own_limits().context("setting the taster's resource limits")?;
    let source = Source {
        config: args.source.config,
        zones: args.source.zones,
        nsid: args.nsid,
        identity: args.identity,
        base_dir: args.base_dir,
        geo_database: args.geo_database,
        ..Source::default()
    };
    if args.tenants_stdin {
        let mut text = String::new();
        std::io::stdin()
            .take(steerdns::files::SMALL_FILE_LIMIT)
            .read_to_string(&mut text)
            .context("reading the tenant batch from standard input")?;
        let batch: steerdns::taster::child::TenantBatch =
            serde_json::from_str(&text).context("the tenant batch is not valid JSON")?;
        let verdict = steerdns::taster::child::taste_tenants(source.read_config(), &batch);
        println!("{}", serde_json::to_string(&verdict)?);
        return Ok(ExitCode::from(verdict.exit_code()));
    }
    if args.difference_stdin {
        let mut text = String::new();
        std::io::stdin()
            .take(steerdns::files::SMALL_FILE_LIMIT)
            .read_to_string(&mut text)
            .context("reading the changed lines from standard input")?;
        let batch: steerdns::taster::child::DifferenceBatch =
            serde_json::from_str(&text).context("the changed lines are not valid JSON")?;
        let verdict = steerdns::taster::child::taste(
            source.read_config(),
            batch.control.as_deref(),
            true,
            &batch.windows,
        );
        println!("{}", serde_json::to_string(&verdict)?);
        return Ok(ExitCode::from(verdict.exit_code()));
    }
    let control = if args.control_stdin {
        let mut text = String::new();
        std::io::stdin()
            .take(steerdns::files::SMALL_FILE_LIMIT)
            .read_to_string(&mut text)
            .context("reading the control text from standard input")?;
        Some(text)
    } else {
        None
    };
    let verdict = steerdns::taster::child::taste(
        source.read_config(),
        control.as_deref(),
        args.steering_only,
        &[],
    );
    println!("{}", serde_json::to_string(&verdict)?);
    Ok(ExitCode::from(verdict.exit_code()))
}

pub fn geoip(command: GeoipCommand) -> Result<ExitCode> {
    match command {
        #[cfg(not(feature = "tools"))]
        GeoipCommand::Build { .. } => anyhow::bail!(
            "this steerdns was built without the `tools` feature (cargo build --features \
             tools): `geoip build` needs it"
        ),
        #[cfg(feature = "tools")]
        GeoipCommand::Build { csv, out } => {
            let report = steerdns::geo::build_mmdb_from_csv(&csv, &out)?;
            println!(
                "wrote {}: {} IPv4 and {} IPv6 networks, {} bytes",
                out.display(),
                report.ipv4_networks,
                report.ipv6_networks,
                report.bytes
            );
        }
        GeoipCommand::Lookup { config, ip } => {
            let config = read_config(&SourceArgs {
                config,
                zones: None,
            })?;
            let policies = config
                .compile_policies(&Default::default())
                .map_err(|errors| {
                    let lines: Vec<String> = errors.iter().map(ToString::to_string).collect();
                    anyhow::anyhow!("config: {}", lines.join("; "))
                })?;
            let regions: Vec<&str> = policies.region_names().collect();
            let locator = steerdns::geo::Locator::compile(&config.geo, &config.base_dir, &regions)?;
            if let Some(reason) = locator.degraded() {
                eprintln!("warning: geo database unusable: {reason}");
            }
            let ip = match ip {
                std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, std::net::IpAddr::V4),
                v4 => v4,
            };
            println!("{}", locator.describe(ip));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn dnssec(command: DnssecCommand) -> Result<ExitCode> {
    match command {
        DnssecCommand::Keygen {
            source,
            zone,
            split,
            algorithm,
        } => crate::cli::dnssec::keygen(&read_config(&source)?, &zone, split, algorithm),
        DnssecCommand::RotateSeed { source, zone } => {
            crate::cli::dnssec::rotate_seed(&read_config(&source)?, &zone)
        }
        DnssecCommand::Ds { source, zone } => crate::cli::dnssec::ds(&read_config(&source)?, &zone),
        DnssecCommand::Status { source } => crate::cli::dnssec::status(&read_config(&source)?),
        DnssecCommand::Dump { source, zone } => {
            crate::cli::dnssec::dump(&read_config(&source)?, &zone)
        }
    }
}

pub fn simulate(args: SimulateArgs) -> Result<ExitCode> {
    use steerdns::shield::sim;
    let config = read_config(&SourceArgs {
        config: args.config,
        zones: None,
    })?;
    let (policies, settings) = sim::compile_topology(&config)?;
    let scenario = sim::Scenario::load(&args.scenario)?;
    if scenario.tenants.is_some() {
        // Tenants: the same surge with tenant-first and with region-wide shedding.
        let comparison = sim::run_tenants(&scenario, &policies, &settings)?;
        sim::write_tenant_outputs(&comparison, &args.out)?;
        print!("{}", sim::tenants_text(&comparison));
        println!(
            "wrote {}{}",
            args.out.join("tenants.csv").display(),
            if cfg!(feature = "tools") {
                format!(" and {}", args.out.join("tenants.svg").display())
            } else {
                String::new()
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    let shield_on = args.shield == "on";
    let count = usize::from(args.nameservers);
    let with_leader = sim::Nameservers {
        count,
        leader: true,
    };
    let (result, consistency) =
        sim::run_nameservers(&scenario, &policies, &settings, shield_on, with_leader)?;
    sim::write_outputs(&result, &args.out)?;
    print!("{}", sim::summary_text(&result));
    if count > 1 {
        let alone = sim::Nameservers {
            count,
            leader: false,
        };
        let (_, apart) = sim::run_nameservers(&scenario, &policies, &settings, shield_on, alone)?;
        print!("{}", sim::consistency_text(&consistency));
        print!("{}", sim::consistency_text(&apart));
    }
    println!(
        "wrote {} and {}",
        args.out.join("timeline.csv").display(),
        args.out.join("plot.svg").display()
    );
    Ok(ExitCode::SUCCESS)
}

/// A secondary zone's TSIG key file that the server could not use, said by `check`: the
/// server itself keeps serving the zone's copy and reports it in status (a bad key file
/// must not stop every zone), so it is a warning here, not a refusal.
fn secondary_key_warnings(config: &Config) {
    for zone in steerdns::snapshot::catalog::secondary_zones(config) {
        if let Err(e) = steerdns::secondary::load_key(&zone) {
            println!(
                "warning: secondary zone {}: {e} (the server serves its copy and transfers \
                 nothing until this is fixed)",
                zone.name
            );
        }
    }
}

pub fn check(args: SourceArgs) -> Result<ExitCode> {
    let config = read_config(&args)?;
    match load(&config) {
        Ok(loaded) => {
            for w in &loaded.warnings {
                println!("{w}");
            }
            secondary_key_warnings(&config);
            println!(
                "ok: {} zones, {} precompiled answers",
                loaded.compiled.zones().zones().len(),
                loaded.compiled.precompiled().len()
            );
            // The process ends here: freeing a million names piece by piece would only delay
            // the exit (the kernel takes the memory back at once).
            std::mem::forget(loaded);
            Ok(ExitCode::SUCCESS)
        }
        Err(problems) => {
            for p in &problems {
                println!("{p}");
            }
            Ok(ExitCode::FAILURE)
        }
    }
}
