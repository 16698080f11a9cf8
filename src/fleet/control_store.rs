//! The etcd implementation of [`ControlStore`]: the fleet's control document over the keys
//! `<prefix>/control` and `<prefix>/history/<serial>` exactly as [`super::store`] lays them out
//! (running fleets depend on that layout). Only [`CONTROL`] for now; tenants (issue 30) get
//! `<prefix>/tenants/<name>` next.
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
    next_serial_above, summary_of, Author, BadEntry, ControlStore, Current, StoreError, Version,
    Versions, Written,
};

/// The fleet's control documents in etcd.
pub struct EtcdStore {
    runtime: tokio::runtime::Runtime,
    client: Mutex<Client>,
    keys: Keys,
    keep: usize,
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
        }
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
        Ok(EtcdStore {
            runtime,
            client: Mutex::new(client),
            keys: Keys::new(&fleet.prefix),
            keep: keep.max(1),
        })
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

    fn current(&self, key: &str) -> Result<Option<Current>, StoreError> {
        self.check_key(key)?;
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
        _text: &str,
        _source: &str,
    ) -> Result<Version, StoreError> {
        self.get(key, serial)?
            .map(|(version, _)| version)
            .ok_or_else(|| StoreError::Missing {
                location: self.location(),
                key: format!("{key} serial {serial}"),
            })
    }

    fn watch_key(&self, key: &str) -> Result<String, StoreError> {
        self.check_key(key)?;
        Ok(self.keys.control())
    }
}
