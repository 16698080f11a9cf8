//! `steerdns tenant list | show | put FILE | delete NAME | history NAME | rollback NAME
//! [VERSION] | diff NAME [A B] | import DIR | quarantine NAME | release NAME | blame`: the running server's tenants, read from
//! `/v1/tenants` — each one's served version and serial, and its last refusal with the reason
//! (file, line, field) — and written through `PUT`/`DELETE /v1/tenants/{name}` when the server
//! answers (checked, tasted and served before it replies), else into the tenants folder through
//! the same control store (key `tenants/<name>`) the server writes. History and diff read the
//! store, as `control history` and `control diff` do (the same code, another key).

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use steerdns::config::Config;
use steerdns::control::store::tenant_key;
use steerdns::http_client::HttpError;
use steerdns::reload::tenants::TenantView;
use steerdns::tenant::{valid_tenant_name, TenantState};

use super::{admin_token, http, open_store, Target};

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

/// `tenant blame`: the status's cells block, read from the running server.
pub fn blame(target: &Target, json: bool) -> Result<ExitCode> {
    let config = target.config()?;
    let status = super::fetch_status(target.admin_addr(&config))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&status.cells)?);
        return Ok(ExitCode::SUCCESS);
    }
    match &status.cells {
        Some(cells) => super::print_cells(cells),
        None => println!("no impaired cells: nothing to blame"),
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
    if let Some(p) = &t.probes {
        println!(
            "monitors {} probed at {:.1}/s of a budget of {:.1}/s{}, {} checks deferred",
            p.monitors.len(),
            p.demand_per_second,
            p.budget_per_second,
            if p.throttled {
                " THROTTLED (intervals stretched)"
            } else {
                ""
            },
            p.deferred_total
        );
        for m in &p.monitors {
            let error = m
                .last_error
                .as_deref()
                .map_or(String::new(), |e| format!(" ({e})"));
            println!(
                "  {} {} {} checks {} failures {}{error}",
                m.name, m.target, m.state, m.checks, m.failures
            );
        }
    }
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

/// What became of one tenant write.
enum Outcome {
    /// The server checked, tasted and serves it: its answer (JSON).
    Served(serde_json::Value),
    /// The server refused it (nothing written): its status and error.
    Refused(u16, String),
    /// No server answered: written into the folder, for the next server to check.
    Written(String),
}

/// Whether `e` is "nothing listens there" (only then is the folder written directly: a
/// request that reached a server may have landed).
fn unreachable(e: &anyhow::Error) -> bool {
    matches!(
        e.downcast_ref::<HttpError>(),
        Some(HttpError::Connect { .. })
    )
}

/// The error text of an admin JSON reply, else the body as it is.
fn error_text(body: &str) -> String {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| {
            let problems = v["problems"].as_array().map(|p| {
                p.iter()
                    .map(|p| {
                        format!(
                            "{}:{}: {}: {}",
                            p["file"].as_str().unwrap_or(""),
                            p["line"],
                            p["field"].as_str().unwrap_or(""),
                            p["problem"].as_str().unwrap_or("")
                        )
                    })
                    .collect::<Vec<_>>()
                    .join("\n")
            });
            problems.or_else(|| v["error"].as_str().map(str::to_string))
        })
        .unwrap_or_else(|| body.trim().to_string())
}

/// Puts `text` as tenant `name`'s document: the server's API, else the local store.
fn put_text(target: &Target, config: &Config, name: &str, text: &str) -> Result<Outcome> {
    if !valid_tenant_name(name) {
        bail!("{name:?} is not a tenant name (1 to 63 lower-case letters, digits or '-'; the file is <tenant>.toml)");
    }
    let addr = target.admin_addr(config);
    let token = admin_token(config);
    let headers = ["Content-Type: application/toml".to_string()];
    let path = format!("/v1/tenants/{name}");
    match http::request_with(
        addr,
        "PUT",
        &path,
        token.as_deref(),
        &headers,
        text.as_bytes(),
    ) {
        Ok(r) if r.status == 200 || r.status == 201 => Ok(Outcome::Served(
            serde_json::from_str(&r.body).unwrap_or(serde_json::Value::Null),
        )),
        Ok(r) => Ok(Outcome::Refused(r.status, error_text(&r.body))),
        Err(e) if unreachable(&e) => write_to_store(config, name, text, None, format!("{e:#}")),
        Err(e) => Err(e),
    }
}

/// No server answered (`why`): `text`, checked alone, written into the store for the next
/// server to check, taste and serve; compare-and-swap on `expected` (the revision the text was
/// derived from), else on the revision found now.
fn write_to_store(
    config: &Config,
    name: &str,
    text: &str,
    expected: Option<u64>,
    why: String,
) -> Result<Outcome> {
    let shown = format!("tenants/{name}.toml");
    if let Err(problems) = steerdns::tenant::parse(&shown, text) {
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        return Ok(Outcome::Refused(0, lines.join("\n")));
    }
    let store = open_store(config)?;
    let key = tenant_key(name);
    let expected = match expected {
        Some(revision) => revision,
        None => store
            .inner
            .current(&key)
            .map_err(|e| store.error(e))?
            .map_or(0, |c| c.revision),
    };
    let author = steerdns::control::store::Author {
        source: "steerdns tenant".into(),
        ..Default::default()
    };
    store
        .inner
        .compare_and_write(&key, expected, text, &author)
        .map_err(|e| store.error(e))?;
    Ok(Outcome::Written(why))
}

/// Prints what became of a write; whether it is served (or written for a server to come).
fn report(name: &str, outcome: Outcome) -> bool {
    match outcome {
        Outcome::Served(reply) => {
            let t = &reply["tenant"];
            println!(
                "tenant {name}: serving serial {} version {}",
                t["serial"],
                t["version"].as_str().unwrap_or("?")
            );
            true
        }
        Outcome::Refused(code, reason) => {
            let by = if code == 0 {
                String::new()
            } else {
                format!(" (HTTP {code})")
            };
            eprintln!("tenant {name}: refused{by}, nothing written:\n{reason}");
            false
        }
        Outcome::Written(why) => {
            println!(
                "tenant {name}: written to the tenants folder ({why}); a server checks, tastes and serves it when it reads the folder"
            );
            true
        }
    }
}

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The tenant a file is the document of: its stem (`contoso.toml` → `contoso`).
fn name_of(file: &Path) -> Result<String> {
    let stem = file
        .file_stem()
        .and_then(|s| s.to_str())
        .with_context(|| format!("{}: no file name", file.display()))?;
    Ok(stem.to_string())
}

/// `tenant put FILE`.
pub fn put(target: &Target, file: &Path) -> Result<ExitCode> {
    let config = target.config()?;
    let name = name_of(file)?;
    let text = steerdns::files::read_text_limited(file, steerdns::files::SMALL_FILE_LIMIT)
        .with_context(|| format!("reading {}", file.display()))?;
    let outcome = put_text(target, &config, &name, &text)?;
    Ok(exit(report(&name, outcome)))
}

/// `tenant quarantine NAME` (`Quarantined`) / `tenant release NAME` (`Active`): through the
/// running server's API, else the document in the store edited and written for the next
/// server to serve.
pub fn set_state(target: &Target, name: &str, to: TenantState) -> Result<ExitCode> {
    if !valid_tenant_name(name) {
        bail!("{name:?} is not a tenant name (1 to 63 lower-case letters, digits or '-')");
    }
    let config = target.config()?;
    let addr = target.admin_addr(&config);
    let token = admin_token(&config);
    let verb = match to {
        TenantState::Quarantined => "quarantine",
        _ => "release",
    };
    let path = format!("/v1/tenants/{name}/{verb}");
    let outcome = match http::request(addr, "POST", &path, token.as_deref(), b"") {
        Ok(r) if r.status == 200 || r.status == 202 => {
            Outcome::Served(serde_json::from_str(&r.body).unwrap_or(serde_json::Value::Null))
        }
        Ok(r) => Outcome::Refused(r.status, error_text(&r.body)),
        Err(e) if unreachable(&e) => {
            let store = open_store(&config)?;
            let key = tenant_key(name);
            let Some(current) = store.inner.current(&key).map_err(|e| store.error(e))? else {
                bail!("no tenant document {key}");
            };
            let text = steerdns::tenant::edit::set_state(&current.text, to)
                .map_err(|e| anyhow::anyhow!("{key}: {e}"))?;
            let why = format!("{e:#}");
            let written = write_to_store(&config, name, &text, Some(current.revision), why)?;
            return Ok(exit(report(name, written)));
        }
        Err(e) => return Err(e),
    };
    let ok = report(name, outcome);
    if ok {
        println!("tenant {name}: {}", to.as_str());
    }
    Ok(exit(ok))
}

/// `tenant delete NAME`.
pub fn delete(target: &Target, name: &str) -> Result<ExitCode> {
    let config = target.config()?;
    let addr = target.admin_addr(&config);
    let token = admin_token(&config);
    let path = format!("/v1/tenants/{name}");
    match http::request(addr, "DELETE", &path, token.as_deref(), b"") {
        Ok(r) if r.status == 200 => {
            println!("tenant {name}: removed; its names answer as the platform's");
            Ok(ExitCode::SUCCESS)
        }
        Ok(r) => bail!(
            "tenant {name}: not removed (HTTP {}): {}",
            r.status,
            error_text(&r.body)
        ),
        Err(e) if unreachable(&e) => {
            let store = open_store(&config)?;
            let key = tenant_key(name);
            let Some(current) = store.inner.current(&key).map_err(|e| store.error(e))? else {
                bail!("no tenant document {key}");
            };
            store
                .inner
                .compare_and_delete(&key, current.revision)
                .map_err(|e| store.error(e))?;
            println!("tenant {name}: document removed from the folder ({e:#})");
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => Err(e),
    }
}

/// `tenant history NAME`.
pub fn history(target: &Target, name: &str) -> Result<ExitCode> {
    super::history_of(target, &tenant_key(name))
}

/// The serials recorded for tenant `name`, oldest first.
fn serials(config: &Config, name: &str) -> Result<Vec<u64>> {
    let store = open_store(config)?;
    let versions = store
        .inner
        .versions(&tenant_key(name))
        .map_err(|e| store.error(e))?;
    Ok(versions.versions.iter().map(|v| v.serial).collect())
}

/// `tenant rollback NAME [VERSION]`: the version's text put back (a new serial).
pub fn rollback(target: &Target, name: &str, version: Option<u64>) -> Result<ExitCode> {
    let config = target.config()?;
    let recorded = serials(&config, name)?;
    let serial = match version {
        Some(v) => v,
        None => {
            // The one before the version served, else before the newest recorded.
            let served = get(target, &format!("/v1/tenants/{name}"))
                .ok()
                .and_then(|body| serde_json::from_str::<TenantView>(&body).ok())
                .and_then(|t| t.serial);
            let before = match served {
                Some(served) => recorded.iter().rev().find(|s| **s < served),
                None => recorded.iter().rev().nth(1),
            };
            *before.with_context(|| {
                format!("tenant {name}: no earlier version to roll back to (see `steerdns tenant history {name}`)")
            })?
        }
    };
    let store = open_store(&config)?;
    let (_, text) = store
        .inner
        .get(&tenant_key(name), serial)
        .map_err(|e| store.error(e))?
        .with_context(|| {
            format!("tenant {name}: version {serial} is not in its history (see `steerdns tenant history {name}`)")
        })?;
    println!("tenant {name}: rolling back to version {serial}");
    let outcome = put_text(target, &config, name, &text)?;
    Ok(exit(report(name, outcome)))
}

/// `tenant diff NAME [A B]` (default: the two newest versions).
pub fn diff(target: &Target, name: &str, a: Option<u64>, b: Option<u64>) -> Result<ExitCode> {
    let (a, b) = match (a, b) {
        (Some(a), Some(b)) => (a, b),
        (None, None) => {
            let config = target.config()?;
            let recorded = serials(&config, name)?;
            match recorded.as_slice() {
                [.., a, b] => (*a, *b),
                _ => bail!("tenant {name}: fewer than two versions recorded"),
            }
        }
        _ => bail!("give both versions (A B) or neither"),
    };
    super::diff_of(target, &tenant_key(name), a, b)
}

/// `tenant import DIR`: every `<tenant>.toml` in DIR, one by one, in name order.
pub fn import(target: &Target, dir: &Path) -> Result<ExitCode> {
    let config = target.config()?;
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension().is_some_and(|x| x == "toml")
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'))
        })
        .collect();
    files.sort();
    let (mut served, mut refused) = (0usize, 0usize);
    for file in &files {
        let name = name_of(file)?;
        let text = steerdns::files::read_text_limited(file, steerdns::files::SMALL_FILE_LIMIT)
            .with_context(|| format!("reading {}", file.display()))?;
        let ok = match put_text(target, &config, &name, &text) {
            Ok(outcome) => report(&name, outcome),
            Err(e) => {
                eprintln!("tenant {name}: {e:#}");
                false
            }
        };
        if ok {
            served += 1;
        } else {
            refused += 1;
        }
    }
    println!(
        "imported {served} of {} tenant documents from {} ({refused} refused)",
        files.len(),
        dir.display()
    );
    Ok(exit(refused == 0))
}
