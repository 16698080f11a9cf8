//! The etcd implementation of [`ControlStore`]: the fleet's control document over the keys
//! `<prefix>/control` and `<prefix>/history/<serial>` exactly as [`super::store`] lays them out
//! (running fleets depend on that layout), and, with [`EtcdStore::with_tenants`], one key per
//! tenant (`<prefix>/tenants/<name>`, see [`super::tenants`]): its `mod_revision` is the
//! document's revision. A tenant written here is also written into this node's tenants folder
//! (the node's cache of etcd's tenants), so the registry's next look at the folder sees the
//! bytes it served; a tenant's history of accepted versions is the node's own, kept in the
//! folder by the local store as on a single node.
//!
//! Blocking, over its own current-thread runtime: for the CLI, never inside an async task.
//! A version enters the history in the same transaction that writes it, so
//! [`ControlStore::record_accepted`] only looks it up; what each node serves and refused stays
//! in its registry record (`<prefix>/nodes/<name>`), written by the node.

use std::sync::Mutex;

use etcd_client::Client;

use super::store::{self as keys_store, FleetVersion};
use super::{FleetError, Keys};
use crate::control::store::{
    next_serial_above, summary_of, tenant_of_key, Author, BadEntry, ControlStore, Current,
    FileStore, StoreError, Version, Versions, Written, CONTROL,
};

/// The fleet's control documents in etcd.
pub struct EtcdStore {
    runtime: tokio::runtime::Runtime,
    client: Mutex<Client>,
    keys: Keys,
    keep: usize,
    /// The node's local store (tenants' histories) and its tenants folder, when tenants are on.
    tenants: Option<(FileStore, std::path::PathBuf)>,
    /// Whether a tenant written is also written into the node's folder.
    mirror: bool,
}

impl EtcdStore {
    /// Over a client connected on `runtime` (its connection lives on that runtime); `keep`
    /// bounds each document's history.
    pub fn new(
        runtime: tokio::runtime::Runtime,
        client: Client,
        keys: Keys,
        keep: usize,
    ) -> EtcdStore {
        EtcdStore {
            runtime,
            client: Mutex::new(client),
            keys,
            keep: keep.max(1),
            tenants: None,
            mirror: false,
        }
    }

    /// This store with tenant keys: in etcd, mirrored into the folder `dir`, their histories
    /// in `local` (the node's file store with that folder).
    pub fn with_tenants(mut self, local: FileStore, dir: std::path::PathBuf) -> EtcdStore {
        self.tenants = Some((local, dir));
        self.mirror = true;
        self
    }

    /// Tenant writes go to etcd only, not into the node's folder: a fleet that stages tenant
    /// changes serves them through its canary first (`super::tenants`), and a file in the
    /// folder would be served by this node at its next look.
    pub fn staged(mut self) -> EtcdStore {
        self.mirror = false;
        self
    }

    /// The local store and the tenant's name, when `key` is a tenant's and tenants are on.
    fn tenant_store<'k>(&self, key: &'k str) -> Option<(&FileStore, &'k str)> {
        let name = tenant_of_key(key)?;
        self.tenants.as_ref().map(|(local, _)| (local, name))
    }

    /// Writes (or removes) a tenant's file in the node's folder after etcd took the change;
    /// a failure is logged: the node's watch writes the same bytes again.
    fn mirror_locally(&self, name: &str, text: Option<&str>) {
        if let (Some((_, dir)), true) = (&self.tenants, self.mirror) {
            super::tenants::write_document(dir, name, text);
        }
    }

    fn current_tenant(&self, name: &str) -> Result<Option<Current>, StoreError> {
        let name = name.to_owned();
        let kv = self.run("reading a tenant", |mut c, k| async move {
            let response = c.get(k.tenant(&name), None).await?;
            Ok(response
                .kvs()
                .first()
                .map(|kv| (kv.mod_revision(), kv.value().to_vec())))
        })?;
        let Some((revision, value)) = kv else {
            return Ok(None);
        };
        let text = super::tenants::document(&value).map_err(|why| StoreError::Read {
            location: self.location(),
            message: format!("tenant key: {why}"),
        })?;
        Ok(Some(Current {
            revision: u64::try_from(revision).unwrap_or(0),
            serial: 0,
            text,
        }))
    }

    fn write_tenant(
        &self,
        key: &str,
        name: &str,
        expected: u64,
        text: &str,
    ) -> Result<Written, StoreError> {
        let before = self.current_tenant(name)?;
        let found = before.as_ref().map_or(0, |c| c.revision);
        if found != expected {
            return Err(self.conflict(key, expected, found));
        }
        let (owned_name, owned_text) = (name.to_owned(), text.to_owned());
        let expected_revision = i64::try_from(expected).unwrap_or(i64::MAX);
        let landed = self.run("writing a tenant", |mut c, k| async move {
            super::tenants::put(&mut c, &k, &owned_name, expected_revision, &owned_text).await
        })?;
        let Some(revision) = landed else {
            let found = self.current_tenant(name)?.map_or(0, |c| c.revision);
            return Err(self.conflict(key, expected, found));
        };
        self.mirror_locally(name, Some(text));
        Ok(Written {
            revision: u64::try_from(revision).unwrap_or(0),
            serial: 0,
            text: text.to_owned(),
            summary: if before.is_some() {
                "document replaced".into()
            } else {
                "first version".into()
            },
        })
    }

    /// Connects to the fleet's etcd (bounded by the client's own timeouts).
    pub fn connect(
        fleet: &crate::config::fleet::FleetConfig,
        keep: usize,
    ) -> Result<EtcdStore, StoreError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| backend("starting the async runtime", e))?;
        let client = runtime
            .block_on(super::client::connect(fleet))
            .map_err(|e| backend("connecting to etcd", e))?;
        Ok(EtcdStore::new(
            runtime,
            client,
            Keys::new(&fleet.prefix),
            keep,
        ))
    }

    /// Runs one async step with the client; a failure names the step and the prefix.
    fn run<T, F>(&self, step: &str, work: impl FnOnce(Client, Keys) -> F) -> Result<T, StoreError>
    where
        F: std::future::Future<Output = Result<T, FleetError>>,
    {
        // A poisoned lock only means another call panicked; the client itself is fine.
        let client = self
            .client
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone();
        self.runtime
            .block_on(work(client, self.keys.clone()))
            .map_err(|e| backend(step, e))
    }
}

fn backend(step: &str, e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Backend {
        step: step.to_owned(),
        source: Box::new(e),
    }
}

fn version_of(v: &FleetVersion) -> Version {
    Version {
        serial: v.serial,
        time: v.time.clone(),
        source: v.source.clone(),
        summary: v.summary.clone(),
        revision: u64::try_from(v.revision).ok(),
        emergency: v.emergency,
    }
}

impl ControlStore for EtcdStore {
    fn location(&self) -> String {
        format!("etcd {}", self.keys.prefix())
    }

    fn check_key(&self, key: &str) -> Result<(), StoreError> {
        if key == CONTROL || self.tenant_store(key).is_some() {
            return Ok(());
        }
        Err(StoreError::UnknownKey {
            location: self.location(),
            key: key.to_owned(),
        })
    }

    fn current(&self, key: &str) -> Result<Option<Current>, StoreError> {
        self.check_key(key)?;
        if let Some((_, name)) = self.tenant_store(key) {
            return self.current_tenant(name);
        }
        let control = self.run("reading the control state", |mut c, k| async move {
            keys_store::get_control(&mut c, &k).await
        })?;
        Ok(control.map(|c| Current {
            revision: u64::try_from(c.revision).unwrap_or(0),
            serial: c.serial,
            text: c.text,
        }))
    }

    fn versions(&self, key: &str) -> Result<Versions, StoreError> {
        self.check_key(key)?;
        if let Some((local, _)) = self.tenant_store(key) {
            return local.versions(key);
        }
        let listed = self.run("reading the history", |mut c, k| async move {
            keys_store::history(&mut c, &k).await
        })?;
        Ok(Versions {
            versions: listed.records.iter().map(version_of).collect(),
            bad: listed
                .bad
                .into_iter()
                .map(|b| BadEntry {
                    location: b.key,
                    problem: b.reason,
                })
                .collect(),
        })
    }

    fn get(&self, key: &str, serial: u64) -> Result<Option<(Version, String)>, StoreError> {
        self.check_key(key)?;
        if let Some((local, _)) = self.tenant_store(key) {
            return local.get(key, serial);
        }
        let version = self.run("reading the history", |mut c, k| async move {
            keys_store::version(&mut c, &k, serial).await
        })?;
        Ok(version.map(|v| (version_of(&v), v.text)))
    }

    /// The fleet's rule: every version carries an explicit serial.
    fn compare_and_write(
        &self,
        key: &str,
        expected: u64,
        text: &str,
        author: &Author,
    ) -> Result<Written, StoreError> {
        self.check_key(key)?;
        if let Some((_, name)) = self.tenant_store(key) {
            return self.write_tenant(key, name, expected, text);
        }
        let current = self.current(key)?;
        let found = current.as_ref().map_or(0, |c| c.revision);
        if found != expected {
            return Err(self.conflict(key, expected, found));
        }
        let newest = self.run("reading the history", |mut c, k| async move {
            keys_store::newest_history_serial(&mut c, &k).await
        })?;
        let serial = next_serial_above([
            current.as_ref().map_or(0, |c| c.serial),
            newest,
            author.floor,
        ]);
        let text =
            crate::control::edit::set_serial(text, serial).map_err(|source| StoreError::Edit {
                location: self.location(),
                source,
            })?;
        let summary = summary_of(current.as_ref().map(|c| c.text.as_str()), &text);
        let version =
            keys_store::version_json(serial, &author.source, &summary, &text, author.emergency)
                .map_err(|e| backend("encoding a history entry", e))?;
        let expected_revision = i64::try_from(expected).unwrap_or(i64::MAX);
        let written = text.clone();
        let landed = self
            .run("writing the control state", |mut c, k| async move {
                keys_store::write_version(&mut c, &k, expected_revision, &written, serial, version)
                    .await
            })
            .map_err(|e| StoreError::Unconfirmed {
                location: self.location(),
                serial,
                message: e.to_string(),
            })?;
        let Some(revision) = landed else {
            let found = self.current(key)?.map_or(0, |c| c.revision);
            return Err(self.conflict(key, expected, found));
        };
        let keep = self.keep;
        if let Err(e) = self.run("pruning the history", |mut c, k| async move {
            keys_store::prune_history(&mut c, &k, keep).await
        }) {
            tracing::warn!("fleet history not pruned: {e}");
        }
        Ok(Written {
            revision: u64::try_from(revision).unwrap_or(0),
            serial,
            text,
            summary,
        })
    }

    fn record_accepted(
        &self,
        key: &str,
        serial: u64,
        text: &str,
        source: &str,
    ) -> Result<Version, StoreError> {
        if let Some((local, _)) = self.tenant_store(key) {
            return local.record_accepted(key, serial, text, source);
        }
        self.get(key, serial)?
            .map(|(version, _)| version)
            .ok_or_else(|| StoreError::Missing {
                location: self.location(),
                key: format!("{key} serial {serial}"),
            })
    }

    fn watch_key(&self, key: &str) -> Result<String, StoreError> {
        self.check_key(key)?;
        match self.tenant_store(key) {
            Some((_, name)) => Ok(self.keys.tenant(name)),
            None => Ok(self.keys.control()),
        }
    }

    fn compare_and_delete(&self, key: &str, expected: u64) -> Result<(), StoreError> {
        self.check_key(key)?;
        let Some((_, name)) = self.tenant_store(key) else {
            return Err(StoreError::UnknownKey {
                location: self.location(),
                key: key.to_owned(),
            });
        };
        let found = self.current_tenant(name)?.map_or(0, |c| c.revision);
        if found == 0 {
            return Err(StoreError::Missing {
                location: self.location(),
                key: key.to_owned(),
            });
        }
        if found != expected {
            return Err(self.conflict(key, expected, found));
        }
        let owned = name.to_owned();
        let expected_revision = i64::try_from(expected).unwrap_or(i64::MAX);
        let deleted = self.run("removing a tenant", |mut c, k| async move {
            super::tenants::delete(&mut c, &k, &owned, expected_revision).await
        })?;
        if !deleted {
            let found = self.current_tenant(name)?.map_or(0, |c| c.revision);
            return Err(self.conflict(key, expected, found));
        }
        self.mirror_locally(name, None);
        Ok(())
    }
}
