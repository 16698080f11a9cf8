//! Zone validation: checks a [`ParsedZone`] for things that parse but must not be served
//! (errors) or that are probably mistakes (warnings), each pointing at the record's file:line.
//!
//! It only reads the parsed records; it does not build lookup structures or touch the network.
//! Owner names are compared through their lower-cased wire form (one byte arena for a whole
//! zone), which keeps a million-name zone cheap to check.

use std::collections::{BTreeSet, HashMap};

use hickory_proto::rr::{Name, RecordType};

use super::group::{ancestors, label_count, push_wire_key, Grouped};
use super::model::name_to_wire;
use super::parse::{type_text, ParsedZone, SourceRecord, ZoneProblem};

/// All errors and warnings for `zone`, sorted by file and line.
pub fn validate(zone: &ParsedZone) -> Vec<ZoneProblem> {
    let mut problems = Vec::new();
    let inside: Vec<&SourceRecord> = check_outside(zone, &mut problems);
    let owners = Owners::group(&inside);
    let apex = name_to_wire(&zone.origin);
    check_soa(zone, &inside, &mut problems);
    check_cnames(zone, &apex, &owners, &mut problems);
    check_apex_ns(zone, &apex, &owners, &mut problems);
    check_delegations(&apex, &owners, &mut problems);
    check_rrsets(&owners, &mut problems);
    problems.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    problems
}

/// Records grouped by owner name, compared case-insensitively through their lower-cased wire
/// form (owners in order of first appearance, records in file order within each owner).
struct Owners<'z> {
    grouped: Grouped,
    /// The records, owner by owner.
    records: Vec<&'z SourceRecord>,
}

impl<'z> Owners<'z> {
    fn group(records: &[&'z SourceRecord]) -> Owners<'z> {
        let grouped = Grouped::new(records.len(), |i, out| {
            push_wire_key(out, &records[i].name);
        });
        let mut by_owner = Vec::with_capacity(records.len());
        for (_, members) in grouped.iter() {
            by_owner.extend(members.iter().map(|&i| records[i as usize]));
        }
        Owners {
            grouped,
            records: by_owner,
        }
    }

    /// Each owner's key and records.
    fn iter(&self) -> impl Iterator<Item = (&[u8], &[&'z SourceRecord])> {
        let mut at = 0;
        self.grouped.iter().map(move |(key, members)| {
            let records = self.records.get(at..at + members.len()).unwrap_or_default();
            at += members.len();
            (key, records)
        })
    }

    /// The records at the owner with this key (lower-cased wire form).
    fn get(&self, key: &[u8]) -> Option<&[&'z SourceRecord]> {
        self.records.get(self.grouped.range(key)?)
    }
}

fn error(record: &SourceRecord, message: String) -> ZoneProblem {
    ZoneProblem::error(record.file.as_path(), record.line, message)
}

fn warning(record: &SourceRecord, message: String) -> ZoneProblem {
    ZoneProblem::warning(record.file.as_path(), record.line, message)
}

/// "line 12", or "other.zone:12" when `there` is in another file than `here`.
fn position(there: &SourceRecord, here: &SourceRecord) -> String {
    if there.file == here.file {
        format!("line {}", there.line)
    } else {
        format!("{}:{}", there.file.display(), there.line)
    }
}

/// Reports records outside the zone and returns the others.
fn check_outside<'z>(
    zone: &'z ParsedZone,
    problems: &mut Vec<ZoneProblem>,
) -> Vec<&'z SourceRecord> {
    let mut inside = Vec::new();
    for record in &zone.records {
        if zone.origin.zone_of(&record.name) {
            inside.push(record);
        } else {
            let message = format!(
                "{} is outside the zone {}; the record is ignored",
                record.name, zone.origin
            );
            problems.push(error(record, message));
        }
    }
    inside
}

fn check_soa(zone: &ParsedZone, records: &[&SourceRecord], problems: &mut Vec<ZoneProblem>) {
    let soas: Vec<&SourceRecord> = records
        .iter()
        .copied()
        .filter(|r| r.rtype == RecordType::SOA)
        .collect();
    let Some(first) = soas.first() else {
        let message = format!("no SOA record at the apex {}", zone.origin);
        problems.push(ZoneProblem::error(&zone.path, 0, message));
        return;
    };
    for soa in &soas[1..] {
        let message = format!(
            "more than one SOA record (the first is at {})",
            position(first, soa)
        );
        problems.push(error(soa, message));
    }
    for soa in soas.iter().filter(|soa| soa.name != zone.origin) {
        let message = format!(
            "SOA record at {} is not at the zone apex {}",
            soa.name, zone.origin
        );
        problems.push(error(soa, message));
    }
}

/// DNSSEC records may sit beside a CNAME (RFC 4035 §2.5); nothing else may (RFC 1034 §3.6.2).
fn may_sit_beside_cname(rtype: RecordType) -> bool {
    matches!(
        rtype,
        RecordType::CNAME | RecordType::RRSIG | RecordType::NSEC
    )
}

fn check_cnames(
    zone: &ParsedZone,
    apex: &[u8],
    owners: &Owners<'_>,
    problems: &mut Vec<ZoneProblem>,
) {
    for (owner, records) in owners.iter() {
        let cnames: Vec<&SourceRecord> = records
            .iter()
            .copied()
            .filter(|r| r.rtype == RecordType::CNAME)
            .collect();
        let Some(first) = cnames.first() else {
            continue;
        };
        if owner == apex {
            problems.push(error(
                first,
                format!("CNAME at the zone apex {}", zone.origin),
            ));
        }
        for extra in &cnames[1..] {
            let message = format!(
                "more than one CNAME at {} (the first is at {})",
                first.name,
                position(first, extra)
            );
            problems.push(error(extra, message));
        }
        let others: Vec<String> = records
            .iter()
            .filter(|r| !may_sit_beside_cname(r.rtype))
            .map(|r| format!("{} at {}", type_text(r.rtype), position(r, first)))
            .collect();
        if !others.is_empty() {
            let message = format!(
                "CNAME beside other data at {} ({})",
                first.name,
                others.join(", ")
            );
            problems.push(error(first, message));
        }
    }
}

fn check_apex_ns(
    zone: &ParsedZone,
    apex: &[u8],
    owners: &Owners<'_>,
    problems: &mut Vec<ZoneProblem>,
) {
    let has_ns = owners
        .get(apex)
        .is_some_and(|records| records.iter().any(|r| r.rtype == RecordType::NS));
    if !has_ns {
        let message = format!("no NS records at the apex {}", zone.origin);
        problems.push(ZoneProblem::warning(&zone.path, 0, message));
    }
}

/// Decodes the uncompressed name at the start of `wire` (as written by the parser).
fn wire_name(wire: &[u8]) -> Option<Name> {
    let mut labels: Vec<&[u8]> = Vec::new();
    let mut i = 0;
    loop {
        let len = usize::from(*wire.get(i)?);
        if len == 0 {
            break;
        }
        // Compression pointers never occur in parser output; anything odd is not a name.
        if len > 63 {
            return None;
        }
        labels.push(wire.get(i + 1..i + 1 + len)?);
        i += 1 + len;
    }
    Name::from_labels(labels).ok()
}

/// A zone cut: the parent side of a delegation (NS below the apex).
struct Cut<'o, 'z> {
    key: &'o [u8],
    /// The owner name, lower-cased (as problems name it).
    name: Name,
    records: &'o [&'z SourceRecord],
    /// Lower-cased wire names of its NS targets: the names whose addresses are glue.
    targets: BTreeSet<Vec<u8>>,
}

/// The names that are the parent side of a zone cut (NS below the apex).
fn delegation_points<'o, 'z>(apex: &[u8], owners: &'o Owners<'z>) -> Vec<Cut<'o, 'z>> {
    owners
        .iter()
        .filter(|(owner, records)| {
            *owner != apex && records.iter().any(|r| r.rtype == RecordType::NS)
        })
        .filter_map(|(key, records)| {
            Some(Cut {
                key,
                name: records.first()?.name.to_lowercase(),
                records,
                targets: BTreeSet::new(),
            })
        })
        .collect()
}

fn check_delegations(apex: &[u8], owners: &Owners<'_>, problems: &mut Vec<ZoneProblem>) {
    let mut cuts = delegation_points(apex, owners);
    if cuts.is_empty() {
        return;
    }
    for cut in &mut cuts {
        for ns in cut.records.iter().filter(|r| r.rtype == RecordType::NS) {
            let Some(target) = wire_name(&ns.rdata) else {
                continue;
            };
            let target = target.to_lowercase();
            let target_key = name_to_wire(&target).into_vec();
            if cut.name.zone_of(&target) && !has_address(owners, &target_key) {
                let message = format!(
                    "delegation {} NS {target} has no glue A/AAAA record in the zone",
                    ns.name
                );
                problems.push(warning(ns, message));
            }
            cut.targets.insert(target_key);
        }
    }
    let by_key: HashMap<&[u8], &Cut<'_, '_>> = cuts.iter().map(|c| (c.key, c)).collect();
    let apex_labels = label_count(apex);
    for (owner, records) in owners.iter() {
        // The delegation point closest to the apex at or above the owner, if any.
        let Some(cut) = ancestors(owner)
            .take(label_count(owner).saturating_sub(apex_labels))
            .filter_map(|ancestor| by_key.get(ancestor))
            .last()
        else {
            continue;
        };
        for record in records.iter() {
            let at_cut_ok =
                owner == cut.key && matches!(record.rtype, RecordType::NS | RecordType::DS);
            let is_glue = matches!(record.rtype, RecordType::A | RecordType::AAAA)
                && cut.targets.contains(owner);
            if !at_cut_ok && !is_glue {
                let (rtype, name) = (type_text(record.rtype), &record.name);
                let message = format!(
                    "{name} {rtype} is below the delegation at {} and will not be served",
                    cut.name
                );
                problems.push(warning(record, message));
            }
        }
    }
}

fn has_address(owners: &Owners<'_>, key: &[u8]) -> bool {
    owners.get(key).is_some_and(|records| {
        records
            .iter()
            .any(|r| matches!(r.rtype, RecordType::A | RecordType::AAAA))
    })
}

/// One TTL per RRset (RFC 2181 §5.2) and no exact duplicates.
fn check_rrsets(owners: &Owners<'_>, problems: &mut Vec<ZoneProblem>) {
    let mut by_type: Vec<&SourceRecord> = Vec::new();
    for (_, records) in owners.iter() {
        if records.len() < 2 {
            continue;
        }
        by_type.clear();
        by_type.extend(records.iter().copied());
        // Stable: each RRset keeps file order.
        by_type.sort_by_key(|r| u16::from(r.rtype));
        for members in by_type.chunk_by(|a, b| a.rtype == b.rtype) {
            let first = members[0];
            if let Some(odd) = members.iter().find(|r| r.ttl != first.ttl) {
                let message = format!(
                    "RRset {} {} has different TTLs ({} at {}, {} here); RFC 2181 requires one TTL per RRset",
                    first.name,
                    type_text(first.rtype),
                    first.ttl,
                    position(first, odd),
                    odd.ttl
                );
                problems.push(warning(odd, message));
            }
            report_duplicates(members, problems);
        }
    }
}

fn report_duplicates(members: &[&SourceRecord], problems: &mut Vec<ZoneProblem>) {
    let mut seen: HashMap<&[u8], &SourceRecord> = HashMap::new();
    for record in members {
        match seen.get(record.rdata.as_slice()) {
            Some(original) => {
                let (name, rtype) = (&record.name, type_text(record.rtype));
                let message = format!(
                    "duplicate {name} {rtype} record (same as {}); it will be merged",
                    position(original, record)
                );
                problems.push(warning(record, message));
            }
            None => {
                seen.insert(record.rdata.as_slice(), record);
            }
        }
    }
}

/// Convenience for callers: does the list contain any error?
pub fn has_errors(problems: &[ZoneProblem]) -> bool {
    problems.iter().any(ZoneProblem::is_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zone::parse::{load_zone_file, parse_zone_text, Severity};
    use std::path::{Path, PathBuf};

    fn origin() -> Name {
        Name::from_ascii("example.com.").expect("test origin")
    }

    fn fixture_dir() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/zones/bad")
    }

    /// Problems of a fixture: parse problems if it does not parse, else validation problems.
    fn problems_of(path: &Path) -> Vec<ZoneProblem> {
        match load_zone_file(path, &origin()) {
            Ok(zone) => validate(&zone),
            Err(problems) => problems,
        }
    }

    /// `(line, severity, text)` marked in a fixture by `; expect error: text` (line 0 for
    /// `; expect-file error: text`).
    fn expectations(path: &Path) -> Vec<(u32, Severity, String)> {
        let text = std::fs::read_to_string(path).expect("read fixture");
        let mut found = Vec::new();
        for (index, line) in text.lines().enumerate() {
            for marker in line.split("; expect").skip(1) {
                let (line_no, rest) = match marker.strip_prefix("-file") {
                    Some(rest) => (0, rest),
                    None => (index as u32 + 1, marker),
                };
                let rest = rest.trim_start();
                let (severity, message) = if let Some(m) = rest.strip_prefix("error:") {
                    (Severity::Error, m)
                } else if let Some(m) = rest.strip_prefix("warning:") {
                    (Severity::Warning, m)
                } else {
                    panic!("{}: bad marker '{marker}'", path.display());
                };
                found.push((line_no, severity, message.trim().to_string()));
            }
        }
        found
    }

    fn fixtures() -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = std::fs::read_dir(fixture_dir())
            .expect("fixture dir")
            .map(|entry| entry.expect("dir entry").path())
            .filter(|p| p.extension().is_some_and(|e| e == "zone"))
            .collect();
        paths.sort();
        paths
    }

    #[test]
    fn every_fixture_reports_exactly_its_marked_problems() {
        let paths = fixtures();
        assert!(paths.len() >= 12, "fixtures missing: {paths:?}");
        for path in paths {
            let expected = expectations(&path);
            assert!(
                !expected.is_empty(),
                "{} has no expect marker",
                path.display()
            );
            let mut found = problems_of(&path);
            for (line, severity, text) in &expected {
                let hit = found.iter().position(|p| {
                    p.line == *line && p.severity == *severity && p.message.contains(text.as_str())
                });
                match hit {
                    Some(index) => {
                        let problem = found.remove(index);
                        assert_eq!(problem.file, path, "problem names the wrong file");
                    }
                    None => panic!(
                        "{}:{line}: expected {severity} '{text}', got {found:#?}",
                        path.display()
                    ),
                }
            }
            assert!(
                found.is_empty(),
                "{}: unexpected problems {found:#?}",
                path.display()
            );
        }
    }

    #[test]
    fn cname_problem_renders_as_documented() {
        let path = fixture_dir().join("cname-beside-data.zone");
        let found = problems_of(&path);
        let rendered = found[0].to_string();
        let expected_prefix = format!(
            "{}:5: error: CNAME beside other data at www.example.com.",
            path.display()
        );
        assert!(rendered.starts_with(&expected_prefix), "{rendered}");
    }

    #[test]
    fn a_clean_zone_has_no_problems() {
        let text = "$TTL 3600\n\
            @ IN SOA ns1 hostmaster 1 7200 900 1209600 300\n\
            @ IN NS ns1\n@ IN NS ns.example.net.\n\
            ns1 IN A 192.0.2.1\nns1 IN AAAA 2001:db8::1\n\
            www IN CNAME edge.example.net.\nwww IN RRSIG \\# 0\n\
            sub IN NS ns.sub\nsub IN DS 1 8 2 00ff\nns.sub IN A 192.0.2.2\n\
            other IN NS ns1.example.com.\n";
        let zone = parse_zone_text(text, Path::new("zones/example.com.zone"), &origin())
            .expect("clean zone parses");
        let found = validate(&zone);
        assert!(found.is_empty(), "{found:#?}");
        assert!(!has_errors(&found));
    }

    #[test]
    fn problems_in_included_files_point_at_them() {
        let dir = std::env::temp_dir().join(format!("steerdns-validate-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let inc = dir.join("www.inc");
        std::fs::write(&inc, "\nwww IN A 192.0.2.9\n").expect("write");
        let main = dir.join("example.com.zone");
        let text = "$TTL 60\n@ IN SOA ns1 h 1 2 3 4 5\n@ IN NS ns1\nns1 IN A 192.0.2.1\nwww IN CNAME x.example.net.\n$INCLUDE www.inc\n";
        std::fs::write(&main, text).expect("write");
        let loaded = load_zone_file(&main, &origin());
        let _ = std::fs::remove_dir_all(&dir);
        let found = validate(&loaded.expect("parses"));
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!((found[0].file.clone(), found[0].line), (main, 5));
        assert!(
            found[0]
                .message
                .contains(&format!("A at {}:2", inc.display())),
            "{}",
            found[0]
        );
    }
}
