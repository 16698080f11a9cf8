//! `steerdns geoip build`: a MaxMind DB from a small CSV of `network,country,continent` rows.
//!
//! Records look like GeoIP2-Country (`{"country":{"iso_code":"GB"},"continent":{"code":"EU"}}`)
//! so the same code reads our databases and MaxMind's. The file is written by the
//! `mmdb-writer` crate as an IPv6 tree with the usual IPv4 aliases, then put in place by
//! [`crate::files::replace_file`] so a running server never sees half a file.

use std::collections::HashMap;
use std::net::Ipv6Addr;
use std::path::Path;

use ipnet::{IpNet, Ipv6Net};
use mmdb_writer::{MetadataPointers, Value, Writer};

use super::locator::CONTINENT_CODES;
use super::GeoError;

/// What [`build_mmdb_from_csv`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildReport {
    pub ipv4_networks: usize,
    pub ipv6_networks: usize,
    /// Size of the written file.
    pub bytes: usize,
}

/// One data row of the CSV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CsvRow {
    pub line: usize,
    pub network: IpNet,
    pub country: Option<String>,
    pub continent: Option<String>,
}

/// Builds `out` from `csv`. Rows are `network,country,continent` (either code may be empty);
/// blank lines, `#` comment lines and a `network,country,continent` header are skipped.
/// More specific networks win over the networks containing them, whatever the row order.
pub fn build_mmdb_from_csv(csv: &Path, out: &Path) -> Result<BuildReport, GeoError> {
    let text = std::fs::read_to_string(csv).map_err(|source| GeoError::Read {
        path: csv.to_path_buf(),
        source,
    })?;
    let rows = parse_csv(&text, csv)?;
    let bytes = write_database(&rows, csv, out)?;
    // Atomic for a running server's reader, durable, permissions kept: the one shared dance.
    crate::files::replace_file(out, &bytes)?;
    Ok(BuildReport {
        ipv4_networks: rows.iter().filter(|r| r.network.addr().is_ipv4()).count(),
        ipv6_networks: rows.iter().filter(|r| r.network.addr().is_ipv6()).count(),
        bytes: bytes.len(),
    })
}

pub(crate) fn parse_csv(text: &str, path: &Path) -> Result<Vec<CsvRow>, GeoError> {
    let mut rows = Vec::new();
    let mut first_line_of: HashMap<IpNet, usize> = HashMap::new();
    let mut seen_data = false;
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let content = raw.trim();
        if content.is_empty() || content.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = content.split(',').map(str::trim).collect();
        let error = |message: String| GeoError::Csv {
            path: path.to_path_buf(),
            line,
            message,
        };
        if !seen_data && is_header(&fields) {
            seen_data = true;
            continue;
        }
        seen_data = true;
        let [network, country, continent] = fields[..] else {
            return Err(error(format!(
                "expected 3 fields (network,country,continent), found {}",
                fields.len()
            )));
        };
        let network = parse_network(network).map_err(error)?;
        let country = parse_country(country).map_err(error)?;
        let continent = parse_continent(continent).map_err(error)?;
        if let Some(first) = first_line_of.insert(network, line) {
            return Err(error(format!(
                "{network} is already defined on line {first}"
            )));
        }
        rows.push(CsvRow {
            line,
            network,
            country,
            continent,
        });
    }
    if rows.is_empty() {
        return Err(GeoError::Csv {
            path: path.to_path_buf(),
            line: text.lines().count().max(1),
            message: "no networks in the file".into(),
        });
    }
    Ok(rows)
}

fn is_header(fields: &[&str]) -> bool {
    let expected = ["network", "country", "continent"];
    fields.len() == expected.len()
        && fields
            .iter()
            .zip(expected)
            .all(|(field, name)| field.eq_ignore_ascii_case(name))
}

/// IPv6 ranges that hold or alias the IPv4 space in an IPv6 tree; rows there would be
/// unreachable or would clash with the aliases, so IPv4 networks must be written as IPv4.
fn ipv4_space_in_ipv6() -> Vec<Ipv6Net> {
    [
        (Ipv6Addr::UNSPECIFIED, 96),
        (Ipv6Addr::new(0, 0, 0, 0, 0, 0xffff, 0, 0), 96),
        (Ipv6Addr::new(0x2002, 0, 0, 0, 0, 0, 0, 0), 16),
        (Ipv6Addr::new(0x2001, 0, 0, 0, 0, 0, 0, 0), 32),
    ]
    .into_iter()
    .filter_map(|(addr, len)| Ipv6Net::new(addr, len).ok())
    .collect()
}

fn parse_network(text: &str) -> Result<IpNet, String> {
    let network: IpNet = text.parse().map_err(|_| {
        format!("\"{text}\" is not a network (expected CIDR such as 192.0.2.0/24 or 2001:db8::/32)")
    })?;
    if network.trunc() != network {
        return Err(format!(
            "{network} has host bits set; did you mean {}?",
            network.trunc()
        ));
    }
    if let IpNet::V6(v6) = network {
        if let Some(reserved) = ipv4_space_in_ipv6()
            .iter()
            .find(|r| r.contains(&v6) || v6.contains(*r))
        {
            return Err(format!(
                "{network} overlaps {reserved}, which holds or aliases IPv4 addresses; write IPv4 networks in IPv4 form"
            ));
        }
    }
    Ok(network)
}

fn parse_country(text: &str) -> Result<Option<String>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    if text.len() == 2 && text.bytes().all(|b| b.is_ascii_uppercase()) {
        Ok(Some(text.to_string()))
    } else {
        Err(format!(
            "\"{text}\" is not a country code (two upper-case letters, ISO 3166-1 alpha-2, or empty)"
        ))
    }
}

fn parse_continent(text: &str) -> Result<Option<String>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    if CONTINENT_CODES.contains(&text) {
        Ok(Some(text.to_string()))
    } else {
        Err(format!(
            "\"{text}\" is not a continent code (one of {}, or empty)",
            CONTINENT_CODES.join(", ")
        ))
    }
}

fn record_value(row: &CsvRow) -> Value {
    let mut fields = Vec::new();
    if let Some(continent) = &row.continent {
        fields.push((
            "continent",
            Value::map([("code", Value::from(continent.as_str()))]),
        ));
    }
    if let Some(country) = &row.country {
        fields.push((
            "country",
            Value::map([("iso_code", Value::from(country.as_str()))]),
        ));
    }
    Value::map(fields)
}

fn write_database(rows: &[CsvRow], csv: &Path, out: &Path) -> Result<Vec<u8>, GeoError> {
    let source_name = csv.file_name().map_or_else(
        || csv.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let description = format!("steerdns country database built from {source_name}");
    let mut writer = Writer::builder("steerdns-Country")
        .description(&[("en", description.as_str())])
        // Inline metadata: some older readers mishandle pointers there.
        .metadata_pointers(MetadataPointers::Disabled)
        .build();
    // The writer replaces on insert, so insert wide networks before the ones inside them.
    let mut ordered: Vec<&CsvRow> = rows.iter().collect();
    ordered.sort_by_key(|row| (row.network.addr().is_ipv6(), row.network.prefix_len()));
    for row in ordered {
        writer
            .insert_value(row.network, record_value(row))
            .map_err(|e| GeoError::Csv {
                path: csv.to_path_buf(),
                line: row.line,
                message: e.to_string(),
            })?;
    }
    writer.to_bytes().map_err(|e| GeoError::Build {
        path: out.to_path_buf(),
        message: e.to_string(),
    })
}

/// The record a lookup of `ip` in a database built from `rows` should find (longest match),
/// for tests that check the writer.
#[cfg(test)]
pub(crate) fn expected_row(rows: &[CsvRow], ip: std::net::IpAddr) -> Option<&CsvRow> {
    rows.iter()
        .filter(|row| row.network.contains(&ip))
        .max_by_key(|row| row.network.prefix_len())
}
