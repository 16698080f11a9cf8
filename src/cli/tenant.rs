//! `steerdns tenant list` and `tenant show NAME`: the running server's tenants, read from
//! `/v1/tenants` — each one's served version and serial, and its last refusal with the
//! reason (file, line, field).

use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use steerdns::reload::tenants::TenantView;

use super::{http, Target};

/// One line per tenant.
pub fn list(target: &Target, json: bool) -> Result<ExitCode> {
    let body = get(target, "/v1/tenants")?;
    if json {
        println!("{body}");
        return Ok(ExitCode::SUCCESS);
    }
    let tenants: Vec<TenantView> =
        serde_json::from_str(&body).context("/v1/tenants is not the expected JSON")?;
    if tenants.is_empty() {
        println!("no tenants (no documents in the tenants folder)");
    }
    for t in &tenants {
        let refused = match &t.last_refusal {
            Some(_) => "; newest document refused (tenant show for why)",
            None => "",
        };
        println!(
            "{} {} {} {}{refused}",
            t.name,
            t.state,
            served(t),
            t.names.join(",")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// One tenant in full.
pub fn show(target: &Target, name: &str, json: bool) -> Result<ExitCode> {
    let body = get(target, &format!("/v1/tenants/{name}"))?;
    if json {
        println!("{body}");
        return Ok(ExitCode::SUCCESS);
    }
    let t: TenantView =
        serde_json::from_str(&body).context("/v1/tenants/NAME is not the expected JSON")?;
    println!("tenant {} ({})", t.name, t.file);
    println!("state {}", t.state);
    println!("served {}", served(&t));
    if let Some(since) = &t.served_since {
        println!("served since {since}");
    }
    println!("names {}", t.names.join(", "));
    println!(
        "answers by {}",
        if t.own_profile {
            "its own profile"
        } else {
            "the platform's wildcard policy"
        }
    );
    match &t.last_refusal {
        Some(r) => {
            println!("last refusal {} ({}):", r.at, r.file);
            for reason in &r.reasons {
                println!("  {reason}");
            }
        }
        None => println!("last refusal none"),
    }
    Ok(ExitCode::SUCCESS)
}

fn served(t: &TenantView) -> String {
    match (&t.serial, &t.version) {
        (Some(serial), Some(version)) => format!("serial {serial} version {version}"),
        _ => "never served".to_string(),
    }
}

fn get(target: &Target, path: &str) -> Result<String> {
    let config = target.config()?;
    let response = http::request(target.admin_addr(&config), "GET", path, None, b"")?;
    if response.status != 200 {
        bail!("HTTP {}: {}", response.status, response.body.trim());
    }
    Ok(response.body)
}
