//! The outgoing-transfer setup a snapshot is served with: `[transfer]` and the TSIG keys read
//! from its key files (re-read on every load, like the TLS material), and the IXFR journal,
//! a value carried from the snapshot served before to the next ([`next_journal`]).
//!
//! Loading fails, naming the field, when a key file cannot be read (or group/world may read
//! it) or a key name the section uses is in no key file.

use super::Compiled;
use crate::config::transfer::{TransferConfig, TransferZoneConfig};
use crate::dns::tsig::{read_key_file, Key};
use crate::zone::journal::Journal;

/// `[transfer]` with its keys.
#[derive(Debug)]
pub struct TransferSetup {
    pub config: TransferConfig,
    pub keys: Vec<Key>,
}

impl TransferSetup {
    /// Reads the key files of `config` and checks every key name it uses.
    pub fn load(config: &TransferConfig) -> Result<TransferSetup, Vec<String>> {
        let mut keys: Vec<Key> = Vec::new();
        for path in &config.key_files {
            let read = read_key_file(path).map_err(|e| vec![format!("transfer.key_files: {e}")])?;
            keys.extend(read);
        }
        let setup = TransferSetup {
            config: config.clone(),
            keys,
        };
        let mut problems = Vec::new();
        let mut check = |field: String, name: &str| {
            if setup.key(name).is_none() {
                problems.push(format!(
                    "{field}: key {name:?} is in none of transfer.key_files"
                ));
            }
        };
        for name in config.keys.iter().flatten() {
            check("transfer.keys".into(), name);
        }
        for (zone, rules) in &config.zone {
            for name in rules.keys.iter().flatten() {
                check(format!("transfer.zone.{zone}.keys"), name);
            }
            for target in &rules.notify {
                if let Some(name) = &target.key {
                    check(format!("transfer.zone.{zone}.notify"), name);
                }
            }
        }
        if problems.is_empty() {
            Ok(setup)
        } else {
            Err(problems)
        }
    }

    /// The key of this name (any case, final dot or not).
    pub fn key(&self, name: &str) -> Option<&Key> {
        let name = name.trim_end_matches('.');
        self.keys.iter().find(|k| k.name.eq_ignore_ascii_case(name))
    }

    /// The rules of the zone named `name` (presentation form), if it has its own.
    pub fn zone(&self, name: &str) -> Option<&TransferZoneConfig> {
        self.config.zone(name)
    }
}

/// The journal to serve `compiled` with, after `previous` (the journal of the snapshot served
/// until now, with what it compiled): a difference recorded for every zone whose serial
/// changed (projected records included: a projection change moves the serial, see
/// [`super::projection`]); the history of a signed zone rebuilt at the same serial (new
/// signatures) dropped.
pub fn next_journal(
    depth: usize,
    previous: Option<(&Journal, &Compiled)>,
    compiled: &Compiled,
) -> Journal {
    // Depth 0 keeps nothing: no difference is computed (it costs a pass over both versions).
    let Some((journal, before)) = previous.filter(|_| depth > 0) else {
        return Journal::new(depth);
    };
    let mut next = journal.clone();
    next.depth = depth;
    for zone in compiled.zones().zones() {
        let Some(old) = before.zones().by_apex(&zone.apex) else {
            continue;
        };
        if let (Some(diff), true) = (compiled.difference(&zone.apex), old.serial != zone.serial) {
            // Applied as a difference: recorded as applied, not found again by comparing every
            // record of both versions.
            next = next.with_difference(&zone.apex, diff.clone());
        } else if old.serial != zone.serial {
            next = next.after_reload(before.transfer_view(old), compiled.transfer_view(zone));
        } else if zone.denial.is_some()
            && !std::ptr::eq(old, zone)
            && next.zone(&zone.apex).is_some()
        {
            // A signed zone rebuilt at the same serial (re-signed): its signatures changed, so
            // the differences recorded no longer start from what a secondary holds.
            next = next.forget(&zone.apex);
        }
    }
    next
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::zone::ixfr::{ixfr_records, IxfrKind};
    use crate::zone::model::example_zone;

    fn zones(serial: u32, www: &str) -> Compiled {
        let zone = example_zone(&format!(
            "$TTL 300\n@ SOA ns1 hostmaster {serial} 3600 600 86400 300\n@ NS ns1\n\
             ns1 A 192.0.2.1\nwww A {www}\n"
        ));
        Compiled::build(vec![zone], crate::snapshot::ServeOptions::default())
    }

    #[test]
    fn the_journal_is_carried_from_one_snapshot_to_the_next() {
        let v1 = zones(1, "192.0.2.2");
        let first = next_journal(5, None, &v1);
        let v2 = zones(2, "192.0.2.3");
        let second = next_journal(5, Some((&first, &v1)), &v2);
        // A reload that changes nothing (same serial) keeps the history as it is.
        let same = next_journal(5, Some((&second, &v2)), &v2);
        assert_eq!(same, second);
        let v3 = zones(3, "192.0.2.4");
        let off = next_journal(0, Some((&same, &v2)), &v3);
        assert_eq!(off.zone(&v3.zones().zones()[0].apex), None);
        let third = next_journal(5, Some((&same, &v2)), &v3);
        let zone = &v3.zones().zones()[0];
        let history = third.zone(&zone.apex);
        assert_eq!(history.map(|h| h.depth()), Some(2));
        let answer = ixfr_records(zone, history, 1).map(|a| a.0);
        assert_eq!(answer, Some(IxfrKind::Incremental));
    }

    #[test]
    fn a_difference_applied_is_journaled_as_the_full_comparison_would_journal_it() {
        let text = |serial: u32, www: &str| {
            format!(
                "$TTL 300\n@ SOA ns1 hostmaster {serial} 3600 600 86400 300\n@ NS ns1\n\
                 ns1 A 192.0.2.1\nwww A {www}\nnew A 192.0.2.9\n"
            )
        };
        let (old_text, new_text) = (text(1, "192.0.2.2"), text(2, "192.0.2.3"));
        let v1 = Compiled::build(
            vec![example_zone(&old_text)],
            crate::snapshot::ServeOptions::default(),
        );
        let served = &v1.zones().zones()[0];
        let origin = served.origin.clone();
        let path = std::path::Path::new("example.com.zone");
        let windows = crate::zone::difference::find_windows(
            old_text.as_bytes(),
            new_text.as_bytes(),
            "example.com.",
        )
        .expect("windows");
        let (mut before, mut after) = (Vec::new(), Vec::new());
        for w in &windows {
            let ttl = w.ttl_line.as_ref();
            let parse = |bytes: &str, range| {
                crate::zone::difference::parse_window(bytes.as_bytes(), range, ttl, path, &origin)
                    .expect("parses")
            };
            before.extend(parse(&old_text, &w.old));
            after.extend(parse(&new_text, &w.new));
        }
        let applied = crate::zone::difference::apply(served, &before, &after).expect("applied");
        let apex = applied.zone.apex.clone();
        let mut v2 = Compiled::build(vec![applied.zone], crate::snapshot::ServeOptions::default());
        v2.differences = vec![(apex.clone(), applied.diff)];
        let journaled = next_journal(5, Some((&Journal::new(5), &v1)), &v2);
        let full = Compiled::build(
            vec![example_zone(&new_text)],
            crate::snapshot::ServeOptions::default(),
        );
        let compared = next_journal(5, Some((&Journal::new(5), &v1)), &full);
        assert!(journaled.zone(&apex).is_some());
        assert_eq!(journaled.zone(&apex), compared.zone(&apex));
    }

    #[test]
    fn key_names_must_be_in_the_key_files_and_the_files_private() {
        let dir = std::env::temp_dir().join(format!("steerdns-xfr-keys-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("t.key");
        std::fs::write(
            &path,
            "key \"xfr\" { algorithm hmac-sha256; secret \"c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0\"; };\n",
        )
        .expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let mut config = TransferConfig {
            key_files: vec![path.clone()],
            ..TransferConfig::default()
        };
        let e = TransferSetup::load(&config).expect_err("world readable");
        assert!(e[0].contains("transfer.key_files"), "{e:?}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        assert_eq!(TransferSetup::load(&config).map(|s| s.keys.len()), Ok(1));
        config.zone.insert(
            "example.com".into(),
            TransferZoneConfig {
                keys: Some(vec!["other".into()]),
                ..TransferZoneConfig::default()
            },
        );
        let e = TransferSetup::load(&config).expect_err("unknown key");
        assert!(e[0].contains("transfer.zone.example.com.keys"), "{e:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
