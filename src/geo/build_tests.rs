//! Tests of `steerdns geoip build` (the `tools` feature): CSV rows to a MaxMind-format
//! database, read back with maxminddb and the committed example checked against its CSV.

use std::net::{IpAddr, Ipv4Addr};
use std::path::Path;

use super::build::{build_mmdb_from_csv, expected_row, parse_csv};
use super::tests::{example_path, ip, reference_lookup, scratch_dir, Rng};
use super::*;

fn csv_error(text: &str) -> String {
    parse_csv(text, Path::new("rows.csv"))
        .unwrap_err()
        .to_string()
}

#[test]
fn csv_errors_name_file_and_line() {
    assert!(
        csv_error("network,country,continent\n# c\n\n10.0.0.0/33,GB,EU\n")
            .starts_with("rows.csv:4: ")
    );
    assert!(csv_error("10.0.0.1/8,GB,EU\n").contains("did you mean 10.0.0.0/8"));
    assert!(csv_error("10.0.0.0/8,gb,EU\n").starts_with("rows.csv:1: \"gb\" is not a country code"));
    assert!(
        csv_error("10.0.0.0/8,GB,XX\n").starts_with("rows.csv:1: \"XX\" is not a continent code")
    );
    assert!(csv_error("10.0.0.0/8,GB\n").contains("expected 3 fields"));
    let dup = csv_error("10.0.0.0/8,GB,EU\n11.0.0.0/8,,EU\n10.0.0.0/8,,EU\n");
    assert!(
        dup.starts_with("rows.csv:3: ") && dup.contains("line 1"),
        "{dup}"
    );
    assert!(csv_error("::ffff:10.0.0.0/104,,EU\n").contains("IPv4 form"));
    assert!(csv_error("2002:a00::/24,,EU\n").contains("2002::/16"));
    assert!(csv_error("# only comments\n").contains("no networks"));
    let missing = build_mmdb_from_csv(Path::new("/nonexistent/x.csv"), Path::new("/tmp/x.mmdb"));
    assert!(missing
        .unwrap_err()
        .to_string()
        .starts_with("/nonexistent/x.csv: cannot read"));
}

#[test]
fn built_database_reads_back_with_maxminddb() {
    let dir = scratch_dir("build");
    let csv = dir.join("rows.csv");
    let text = "network,country,continent\n\
        81.2.69.0/24,GB,EU\n81.0.0.0/8,,EU\n81.2.69.128/25,SE,EU\n\
        8.0.0.0/8,,NA\n214.1.1.0/24,,\n\
        2a00::/12,,EU\n2a02:e700::/29,LY,AF\n2001:218::/32,JP,AS\n";
    std::fs::write(&csv, text).unwrap();
    let out = dir.join("out.mmdb");
    let report = build_mmdb_from_csv(&csv, &out).unwrap();
    assert_eq!((report.ipv4_networks, report.ipv6_networks), (5, 3));
    assert_eq!(report.bytes as u64, std::fs::metadata(&out).unwrap().len());
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "temporary file left behind");

    let rows = parse_csv(text, &csv).unwrap();
    let reader = maxminddb::Reader::open_readfile(&out).unwrap();
    assert_eq!(reader.metadata.ip_version, 6);
    let mut probes: Vec<IpAddr> = rows
        .iter()
        .flat_map(|r| [r.network.network(), r.network.broadcast()])
        .collect();
    probes.extend(
        [
            "81.2.69.127",
            "81.2.70.0",
            "80.255.255.255",
            "9.0.0.0",
            "2a02:e6ff::1",
            "2001:219::",
        ]
        .map(ip),
    );
    let mut rng = Rng(5);
    for _ in 0..2000 {
        probes.push(IpAddr::V4(Ipv4Addr::from(rng.next_u64() as u32)));
    }
    for addr in probes {
        let (codes, _) = reference_lookup(&reader, addr);
        let expected = expected_row(&rows, addr).map(|r| (r.country.clone(), r.continent.clone()));
        assert_eq!(codes, expected, "{addr}");
    }
    // IPv4 data is reachable through the IPv4-mapped alias of the IPv6 tree.
    let (mapped, _) = reference_lookup(&reader, ip("::ffff:81.2.69.200"));
    assert_eq!(mapped, Some((Some("SE".into()), Some("EU".into()))));
    // Our own table reads it too.
    let table = GeoTable::open(&out).unwrap();
    assert_eq!(
        table.lookup(ip("81.2.69.1")).map(|h| h.prefix_len),
        Some(25)
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// `geoip build` writes through `files::replace_file`: a rebuild keeps the database's
/// permissions, and a write that cannot happen names the output file and the failed step.
#[test]
fn rebuilt_database_keeps_its_permissions_and_errors_name_the_output() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch_dir("rebuild");
    let csv = dir.join("rows.csv");
    std::fs::write(&csv, "81.2.69.0/24,GB,EU\n").unwrap();
    let out = dir.join("out.mmdb");
    build_mmdb_from_csv(&csv, &out).unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o640)).unwrap();
    build_mmdb_from_csv(&csv, &out).unwrap();
    let mode = std::fs::metadata(&out).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o640);

    let nowhere = dir.join("missing-dir/out.mmdb");
    let message = build_mmdb_from_csv(&csv, &nowhere).unwrap_err().to_string();
    assert!(
        message.starts_with(&format!("{}: cannot ", nowhere.display())),
        "{message}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn committed_example_database_matches_its_csv() {
    let dir = scratch_dir("example");
    let rebuilt = dir.join("example.mmdb");
    build_mmdb_from_csv(&example_path("example.csv"), &rebuilt).unwrap();
    let committed = GeoTable::open(&example_path("example.mmdb")).unwrap();
    let fresh = GeoTable::open(&rebuilt).unwrap();
    assert_eq!(
        committed.v4_entries(),
        fresh.v4_entries(),
        "rebuild geoip/example.mmdb (see geoip/README.md)"
    );
    assert_eq!(
        committed.v6_entries(),
        fresh.v6_entries(),
        "rebuild geoip/example.mmdb (see geoip/README.md)"
    );
    assert_eq!(committed.locations(), fresh.locations());
    let _ = std::fs::remove_dir_all(dir);
}

/// Regenerates geoip/example.mmdb until `steerdns geoip build` is wired:
/// `cargo test --lib geo::tests::regenerate_example_database -- --ignored`.
#[test]
#[ignore = "writes geoip/example.mmdb; run by hand after editing geoip/example.csv"]
fn regenerate_example_database() {
    let report =
        build_mmdb_from_csv(&example_path("example.csv"), &example_path("example.mmdb")).unwrap();
    assert!(report.ipv4_networks > 200);
}
