//! `steerdns drill list` and `drill run NAME`: the configured practice drills, and one run now
//! against the running server (see `steerdns::drill`), its measured times printed in ms.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::{Context, Result};

use steerdns::drill::{run, Endpoints};

use super::Target;

/// One line per drill, its name first.
pub fn list(target: &Target) -> Result<ExitCode> {
    let config = target.config()?;
    if config.drills.is_empty() {
        println!("no drills configured ([[drills]] in the config)");
    }
    for d in &config.drills {
        let what = match d.action {
            steerdns::config::drill::DrillAction::Shift => format!(
                "shift {}% of {} from {} to {}",
                d.share.unwrap_or(0),
                d.profile.as_deref().unwrap_or("?"),
                d.from.as_deref().unwrap_or("?"),
                d.to.as_deref().unwrap_or("?")
            ),
            steerdns::config::drill::DrillAction::Drain => {
                format!("drain {}", d.region.as_deref().unwrap_or("?"))
            }
            steerdns::config::drill::DrillAction::Fallback => format!(
                "force {} to fallback:{}",
                d.region.as_deref().unwrap_or("?"),
                d.site.as_deref().unwrap_or("?")
            ),
        };
        let every = d
            .every_secs
            .map_or("on demand".to_string(), |e| format!("every {e} s"));
        println!(
            "{}  {what} for {} s; {} sample subnets asking {} {}; {every}",
            d.name,
            d.duration_secs,
            d.subnets.len(),
            d.query,
            d.qtype
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs drill `name` now; `dns`: the server's DNS address (default: the config's first listen
/// address, through loopback if it is unspecified).
pub fn run_now(target: &Target, name: &str, dns: Option<SocketAddr>) -> Result<ExitCode> {
    let config = target.config()?;
    let dns = match dns {
        Some(dns) => dns,
        None => {
            let mut addr = *config
                .server
                .listen
                .first()
                .context("no [server] listen address; give --dns ADDR")?;
            if addr.ip().is_unspecified() {
                addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            addr
        }
    };
    let at = Endpoints {
        admin: target.admin.unwrap_or(config.admin.listen),
        dns,
    };
    let trigger = format!("drill run by {}", steerdns::fleet::store::who());
    let record = run(&config, name, at, &trigger, &mut |line| println!("{line}"))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let ms = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.0} ms"));
    println!(
        "drill {}: {} — change to served {}, revert to served {}, held {}, {} checks of {} subnets{}",
        record.drill,
        record.result.to_uppercase(),
        ms(record.change_to_served_ms),
        ms(record.revert_to_served_ms),
        ms(record.held_ms),
        record.checks,
        record.subnets,
        record
            .reason
            .as_ref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default()
    );
    Ok(if record.result == "passed" {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
