//! Tenants in a fleet: one etcd key per tenant document (`<prefix>/tenants/<name>`, its
//! `mod_revision` the document's revision), and each node's tenants folder as its cache of
//! them.
//!
//! A node does not load tenants from etcd by a path of its own: it writes what etcd holds into
//! its folder (temp file and rename, only the files whose bytes differ, and removes the ones
//! etcd no longer has) and asks the tenant registry to look at the folder, which checks, tastes
//! and serves each changed document alone exactly as for a local edit. So a node that starts
//! with etcd out of reach serves the tenants it last accepted, from its folder, and a node that
//! joins syncs every tenant at one etcd revision (a range read in pages at that revision), then
//! watches from the next one.
//!
//! The first node of a fleet whose etcd holds no tenant seeds etcd from its folder (create if
//! absent, one transaction with the marker `<prefix>/tenants-seeded`, so a fleet whose tenants
//! were all deleted is not seeded again by the next node that starts).
//!
//! Staged per tenant (with `[fleet.rollout]` and a first wave, the canary): a canary node
//! applies each tenant change at once and reports in its registry record how far it applied
//! (`through`, an etcd revision) and which tenants' documents it refused. A node of a later
//! wave holds each tenant change ([`Held`]) until every canary node reports it applied
//! through that revision; then it applies it, or — when a canary refused that tenant's
//! document at that revision — halts that tenant only ([`release`]): it keeps serving the
//! tenant's last good version, names it in status (`fleet.halted_tenants`) and `rollout
//! status`, and every other tenant's changes go on. A newer document for the tenant replaces
//! the halted one. There is no bake time for tenants, and a node syncing at start applies the
//! fleet's tenants without waiting (it catches up with what the canary already passed).
//!
//! Owns the key layout of tenants, the sync and the staging; the writes of the admin API
//! (compare-and-swap on one tenant's key) are [`put`] and [`delete`].

use std::collections::BTreeMap;
use std::path::Path;

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};

use super::status::{HaltedTenant, TenantReport};
use super::{FleetError, Keys};
use crate::control::store::tenant_of_key;
use crate::reload::tenants::TenantRegistry;

/// Tenants read per range request while syncing.
const PAGE: i64 = 1_000;

/// Largest tenant document taken from etcd (the folder's own limit).
const DOCUMENT_LIMIT: usize = 1 << 20;

impl Keys {
    /// The prefix every tenant's key starts with (`<prefix>/tenants/`).
    pub fn tenants(&self) -> String {
        format!("{}/tenants/", self.prefix())
    }

    /// Tenant `name`'s key.
    pub fn tenant(&self, name: &str) -> String {
        format!("{}{name}", self.tenants())
    }

    /// Written once, when the first node seeded the tenants.
    pub fn tenants_seeded(&self) -> String {
        format!("{}/tenants-seeded", self.prefix())
    }
}

/// The end of the range of keys that start with `prefix`.
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Every tenant document in etcd at one revision, by tenant name, and that revision. Keys
/// that name no valid tenant, or whose value is no UTF-8 text of at most 1 MiB, are skipped
/// and named in `bad` (key, why).
pub struct Listed {
    pub revision: i64,
    pub documents: BTreeMap<String, String>,
    /// Each document's key's `mod_revision`.
    pub revisions: BTreeMap<String, i64>,
    pub bad: Vec<(String, String)>,
}

/// Reads every tenant's key, in pages of `PAGE`, all at the revision of the first page.
pub async fn list(client: &mut Client, keys: &Keys) -> Result<Listed, FleetError> {
    let prefix = keys.tenants();
    let end = prefix_end(&prefix);
    let mut from = prefix.as_bytes().to_vec();
    let mut listed = Listed {
        revision: 0,
        documents: BTreeMap::new(),
        revisions: BTreeMap::new(),
        bad: Vec::new(),
    };
    loop {
        let mut options = GetOptions::new()
            .with_range(end.clone())
            .with_limit(PAGE)
            .with_sort(etcd_client::SortTarget::Key, etcd_client::SortOrder::Ascend);
        if listed.revision > 0 {
            options = options.with_revision(listed.revision);
        }
        let response = client.get(from.clone(), Some(options)).await?;
        if listed.revision == 0 {
            listed.revision = response.header().map_or(0, |h| h.revision());
        }
        for kv in response.kvs() {
            let key = String::from_utf8_lossy(kv.key()).into_owned();
            let relative = key.strip_prefix(keys.prefix()).unwrap_or(&key);
            let Some(name) = tenant_of_key(relative.trim_start_matches('/')) else {
                listed.bad.push((key, "not a tenant name".into()));
                continue;
            };
            match document(kv.value()) {
                Ok(text) => {
                    listed.documents.insert(name.to_string(), text);
                    listed.revisions.insert(name.to_string(), kv.mod_revision());
                }
                Err(why) => listed.bad.push((key, why.to_string())),
            }
        }
        match response.kvs().last() {
            Some(last) if response.more() => {
                from = last.key().to_vec();
                from.push(0);
            }
            _ => return Ok(listed),
        }
    }
}

/// Why an etcd value is not a tenant document's text.
#[derive(Debug, thiserror::Error)]
pub enum DocumentError {
    #[error("{0} bytes: above the 1 MiB limit")]
    TooLarge(usize),
    #[error("not UTF-8 text: {0}")]
    NotUtf8(#[from] std::string::FromUtf8Error),
}

/// A value as a tenant document's text.
pub fn document(value: &[u8]) -> Result<String, DocumentError> {
    if value.len() > DOCUMENT_LIMIT {
        return Err(DocumentError::TooLarge(value.len()));
    }
    Ok(String::from_utf8(value.to_vec())?)
}

/// The tenant a watched key names, if it is a tenant's key.
pub fn tenant_of(keys: &Keys, key: &[u8]) -> Option<String> {
    let key = std::str::from_utf8(key).ok()?;
    let relative = key.strip_prefix(keys.prefix())?.trim_start_matches('/');
    tenant_of_key(relative).map(str::to_string)
}

/// Seeds etcd from the node's folder when etcd holds no tenant and was never seeded: every
/// document created if absent, with the marker, in one transaction. `true` when it seeded.
pub async fn seed(
    client: &mut Client,
    keys: &Keys,
    folder: &BTreeMap<String, String>,
) -> Result<bool, FleetError> {
    let marker = keys.tenants_seeded();
    let mut compares = vec![Compare::create_revision(
        marker.clone(),
        CompareOp::Equal,
        0,
    )];
    let mut puts = vec![TxnOp::put(
        marker,
        crate::rfc3339::format_utc(std::time::SystemTime::now()),
        None,
    )];
    for (name, text) in folder {
        let key = keys.tenant(name);
        compares.push(Compare::create_revision(key.clone(), CompareOp::Equal, 0));
        puts.push(TxnOp::put(key, text.as_str(), None));
    }
    let response = client.txn(Txn::new().when(compares).and_then(puts)).await?;
    Ok(response.succeeded())
}

/// Writes tenant `name`'s document if its key is still at `expected` (0: absent); the
/// revision written, or `None` on a conflict.
pub async fn put(
    client: &mut Client,
    keys: &Keys,
    name: &str,
    expected: i64,
    text: &str,
) -> Result<Option<i64>, FleetError> {
    let key = keys.tenant(name);
    let compare = if expected == 0 {
        Compare::create_revision(key.clone(), CompareOp::Equal, 0)
    } else {
        Compare::mod_revision(key.clone(), CompareOp::Equal, expected)
    };
    let txn = Txn::new()
        .when([compare])
        .and_then([TxnOp::put(key, text, None)]);
    let response = client.txn(txn).await?;
    Ok(response
        .succeeded()
        .then(|| response.header().map_or(0, |h| h.revision())))
}

/// Removes tenant `name`'s key if it is still at `expected`; `false` on a conflict.
pub async fn delete(
    client: &mut Client,
    keys: &Keys,
    name: &str,
    expected: i64,
) -> Result<bool, FleetError> {
    let key = keys.tenant(name);
    let txn = Txn::new()
        .when([Compare::mod_revision(
            key.clone(),
            CompareOp::Equal,
            expected,
        )])
        .and_then([TxnOp::delete(key, None)]);
    Ok(client.txn(txn).await?.succeeded())
}

/// Tenant `name`'s revision in etcd now (0: absent).
pub async fn revision(client: &mut Client, keys: &Keys, name: &str) -> Result<i64, FleetError> {
    let response = client.get(keys.tenant(name), None).await?;
    Ok(response.kvs().first().map_or(0, |kv| kv.mod_revision()))
}

/// The node's folder as documents by tenant name (unreadable files left out: the registry
/// reports them on its own look).
pub fn folder_documents(dir: &Path) -> BTreeMap<String, String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return BTreeMap::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let path = entry.path();
            let name = path
                .file_name()?
                .to_str()?
                .strip_suffix(".toml")?
                .to_string();
            if !crate::tenant::valid_tenant_name(&name) || !path.is_file() {
                return None;
            }
            let text = std::fs::read_to_string(&path).ok()?;
            Some((name, text))
        })
        .collect()
}

/// What makes `dir` hold exactly `documents`: the files whose bytes differ (with their new
/// text) and the tenants etcd no longer has (`None`).
pub fn differences(
    dir: &Path,
    documents: &BTreeMap<String, String>,
) -> Vec<(String, Option<String>)> {
    let present = folder_documents(dir);
    let mut changes: Vec<(String, Option<String>)> = documents
        .iter()
        .filter(|(name, text)| present.get(*name) != Some(*text))
        .map(|(name, text)| (name.clone(), Some(text.clone())))
        .collect();
    changes.extend(
        present
            .keys()
            .filter(|n| !documents.contains_key(*n))
            .map(|n| (n.clone(), None)),
    );
    changes
}

/// Writes `changes` into the folder and has the registry look (check, taste, serve); returns
/// the tenants whose document was refused by that look, with the reason. Blocking: the taste
/// runs the taster child.
pub fn apply_in_folder(
    registry: &TenantRegistry,
    dir: &Path,
    changes: &[(String, Option<String>)],
) -> Vec<(String, String)> {
    if changes.is_empty() {
        return Vec::new();
    }
    if let Err(e) = std::fs::create_dir_all(dir) {
        tracing::error!("fleet tenants: cannot create {}: {e}", dir.display());
        return Vec::new();
    }
    let refusal = |name: &str| registry.get(name).and_then(|v| v.last_refusal);
    let before: Vec<_> = changes.iter().map(|(name, _)| refusal(name)).collect();
    for (name, text) in changes {
        write_document(dir, name, text.as_deref());
    }
    let names = changes.iter().map(|(name, _)| name.clone()).collect();
    registry.check_names(&names);
    changes
        .iter()
        .zip(before)
        .filter_map(|((name, _), before)| {
            let after = refusal(name)?;
            (Some(&after) != before.as_ref()).then(|| (name.clone(), after.reasons.join("; ")))
        })
        .collect()
}

/// Writes (or, with `None`, removes) one tenant's file in the node's folder; `true` if done.
pub fn write_document(dir: &Path, name: &str, text: Option<&str>) -> bool {
    let path = dir.join(format!("{name}.toml"));
    let outcome = match text {
        Some(text) => crate::files::replace_file(&path, text.as_bytes()).map_err(|e| e.to_string()),
        None => match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
            _ => Ok(()),
        },
    };
    match outcome {
        Ok(()) => true,
        Err(e) => {
            tracing::error!("fleet tenants: {}: {e}", path.display());
            false
        }
    }
}

/// A tenant change a later-wave node holds until the canary has applied it: the etcd
/// revision of the change and the document (`None`: the key was deleted).
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub revision: i64,
    pub text: Option<String>,
}

/// The held changes every canary node has applied through: taken out of `held` and returned
/// to apply, or returned as halted when a canary refused that tenant's document at that
/// revision. `canary` is each canary node's name and report (`None`: no record, e.g. the node
/// is down: everything stays held).
pub fn release(
    held: &mut BTreeMap<String, Held>,
    canary: &[(String, Option<TenantReport>)],
) -> (Vec<(String, Option<String>)>, Vec<HaltedTenant>) {
    let through = canary
        .iter()
        .map(|(_, report)| report.as_ref().map_or(0, |r| r.through))
        .min()
        .unwrap_or(0);
    let ready: Vec<String> = held
        .iter()
        .filter(|(_, change)| change.revision <= through)
        .map(|(name, _)| name.clone())
        .collect();
    let mut apply = Vec::new();
    let mut halted = Vec::new();
    for name in ready {
        let Some(change) = held.remove(&name) else {
            continue;
        };
        let refusal = canary.iter().find_map(|(node, report)| {
            let refused = report.as_ref()?.refused.get(&name)?;
            (refused.revision == change.revision).then(|| (node.clone(), refused.reason.clone()))
        });
        match refusal {
            Some((node, reason)) => halted.push(HaltedTenant {
                tenant: name,
                revision: change.revision,
                node,
                reason,
            }),
            None => apply.push((name, change.text)),
        }
    }
    (apply, halted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::status::TenantRefusedAt;

    fn report(through: i64, refused: &[(&str, i64)]) -> Option<TenantReport> {
        Some(TenantReport {
            through,
            refused: refused
                .iter()
                .map(|(name, revision)| {
                    let at = TenantRefusedAt {
                        revision: *revision,
                        reason: "taster crashed".into(),
                    };
                    (name.to_string(), at)
                })
                .collect(),
        })
    }

    fn held(changes: &[(&str, i64)]) -> BTreeMap<String, Held> {
        changes
            .iter()
            .map(|(name, revision)| {
                let change = Held {
                    revision: *revision,
                    text: Some(format!("# {name}")),
                };
                (name.to_string(), change)
            })
            .collect()
    }

    #[test]
    fn a_change_waits_for_every_canary_and_a_refused_one_halts_only_its_tenant() {
        let mut waiting = held(&[("good", 10), ("bad", 11), ("later", 20)]);
        // One canary has not applied revision 10 yet: nothing moves.
        let canary = [
            ("ns1".to_string(), report(15, &[("bad", 11)])),
            ("ns2".to_string(), report(9, &[])),
        ];
        assert_eq!(release(&mut waiting, &canary), (vec![], vec![]));
        // Both through 15: good applies, bad halts (refused at 11), later waits.
        let canary = [
            ("ns1".to_string(), report(15, &[("bad", 11)])),
            ("ns2".to_string(), report(15, &[])),
        ];
        let (apply, halted) = release(&mut waiting, &canary);
        assert_eq!(
            apply,
            vec![("good".to_string(), Some("# good".to_string()))]
        );
        assert_eq!(halted.len(), 1);
        assert_eq!(
            (
                halted[0].tenant.as_str(),
                halted[0].revision,
                halted[0].node.as_str()
            ),
            ("bad", 11, "ns1")
        );
        assert_eq!(waiting.keys().collect::<Vec<_>>(), ["later"]);
        // A canary without a record holds everything.
        let canary = [("ns1".to_string(), None)];
        assert_eq!(release(&mut waiting, &canary), (vec![], vec![]));
    }

    #[test]
    fn a_refusal_of_an_older_document_does_not_halt_a_newer_one() {
        let mut waiting = held(&[("bad", 30)]);
        let canary = [("ns1".to_string(), report(30, &[("bad", 11)]))];
        let (apply, halted) = release(&mut waiting, &canary);
        assert_eq!(apply.len(), 1);
        assert!(halted.is_empty());
    }

    #[test]
    fn the_range_of_a_prefix_ends_past_every_key_under_it() {
        assert_eq!(prefix_end("/p/tenants/"), b"/p/tenants0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }

    #[test]
    fn tenant_keys_name_their_tenant_and_nothing_else_does() {
        let keys = Keys::new("/steerdns/prod");
        assert_eq!(keys.tenant("contoso"), "/steerdns/prod/tenants/contoso");
        assert_eq!(
            tenant_of(&keys, b"/steerdns/prod/tenants/contoso").as_deref(),
            Some("contoso")
        );
        assert_eq!(tenant_of(&keys, b"/steerdns/prod/tenants/Bad Name"), None);
        assert_eq!(tenant_of(&keys, b"/steerdns/other/tenants/contoso"), None);
    }

    #[test]
    fn a_document_from_etcd_is_bounded_utf8() {
        assert_eq!(document(b"names = []").ok().as_deref(), Some("names = []"));
        assert!(matches!(
            document(&[0xff, 0xfe]),
            Err(DocumentError::NotUtf8(_))
        ));
        assert!(matches!(
            document(&vec![b'a'; DOCUMENT_LIMIT + 1]),
            Err(DocumentError::TooLarge(n)) if n == DOCUMENT_LIMIT + 1
        ));
    }
}
