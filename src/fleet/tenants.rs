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
//! Owns the key layout of tenants and the sync; the writes of the admin API
//! (compare-and-swap on one tenant's key) are [`put`] and [`delete`].

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use etcd_client::{Client, Compare, CompareOp, GetOptions, Txn, TxnOp};

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
    pub bad: Vec<(String, String)>,
}

/// Reads every tenant's key, in pages of [`PAGE`], all at the revision of the first page.
pub async fn list(client: &mut Client, keys: &Keys) -> Result<Listed, FleetError> {
    let prefix = keys.tenants();
    let end = prefix_end(&prefix);
    let mut from = prefix.as_bytes().to_vec();
    let mut listed = Listed {
        revision: 0,
        documents: BTreeMap::new(),
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
                }
                Err(why) => listed.bad.push((key, why)),
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

/// A value as a tenant document's text.
pub fn document(value: &[u8]) -> Result<String, String> {
    if value.len() > DOCUMENT_LIMIT {
        return Err(format!("{} bytes: above the 1 MiB limit", value.len()));
    }
    String::from_utf8(value.to_vec()).map_err(|e| format!("not UTF-8 text: {e}"))
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

/// Makes `dir` hold exactly `documents` (writing only the files whose bytes differ, removing
/// the tenants etcd no longer has); how many files changed. A file that cannot be written is
/// logged: the registry keeps serving what it has for that tenant.
pub fn mirror(dir: &Path, documents: &BTreeMap<String, String>) -> usize {
    let present = folder_documents(dir);
    let mut changed = 0;
    if let Err(e) = std::fs::create_dir_all(dir) {
        tracing::error!("fleet tenants: cannot create {}: {e}", dir.display());
        return 0;
    }
    for (name, text) in documents {
        if present.get(name) != Some(text) {
            changed += usize::from(write_document(dir, name, Some(text)));
        }
    }
    for name in present.keys().filter(|n| !documents.contains_key(*n)) {
        changed += usize::from(write_document(dir, name, None));
    }
    changed
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

/// Has the registry look at the folder (check, taste, serve what changed), off the async
/// runtime (the taste runs the taster child).
pub async fn look(registry: &Arc<TenantRegistry>) {
    let registry = registry.clone();
    if let Err(e) = tokio::task::spawn_blocking(move || registry.check()).await {
        tracing::error!("fleet tenants: the folder check failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(document(b"names = []").as_deref(), Ok("names = []"));
        assert!(document(&[0xff, 0xfe]).is_err());
        assert!(document(&vec![b'a'; DOCUMENT_LIMIT + 1]).is_err());
    }
}
