//! Automatic quarantine (`[tenants] auto_quarantine`, off by default; issue 31 item 4): when
//! blame *names* tenants for the cells impaired now (drained, probe-down or hot: [`crate::snapshot::impaired`]) — their shards hold
//! every impaired cell and chance explains less than one tenant — each is quarantined as
//! `steerdns tenant quarantine` would: its document's `state` set in the store (compare-and-swap
//! on the revision read), checked, tasted, recorded and served (or staged through the fleet's
//! waves). Once per set of impaired cells; quarantined tenants are left out of the next blame.
//!
//! Runs on its own supervised thread, off the serving path. The store is the caller's (the
//! daemon hands in the admin API's), so this module imports nothing above the reloader.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::cells::blame::{Blame, Verdict};
use crate::cells::ImpairedCells;
use crate::config::Config;
use crate::control::store::{tenant_key, Author, ControlStore, StoreError};
use crate::tenant::edit::NotToml;
use crate::tenant::TenantState;

use super::tenants::PutError;
use super::Reloader;

/// Opens the tenants' store for a config: the store, and whether writes are staged. (Its
/// error is the caller's own type, boxed: this module imports nothing above the reloader.)
pub type TenantStores = dyn Fn(&Config) -> Result<(Box<dyn ControlStore>, bool), Box<dyn std::error::Error + Send + Sync>>
    + Send
    + Sync;

/// Why a tenant named by blame was not quarantined (kept in status with the attempt).
#[derive(Debug, thiserror::Error)]
pub enum QuarantineError {
    #[error(transparent)]
    Config(#[from] super::SourceError),
    #[error("the tenants' store: {0}")]
    Stores(Box<dyn std::error::Error + Send + Sync>),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("no document {0}")]
    NoDocument(String),
    #[error(transparent)]
    Edit(#[from] NotToml),
    #[error(transparent)]
    Put(#[from] PutError<StoreError>),
}

/// How often the impaired cells in service are looked at.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// One tenant quarantined by blame, as status shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AutoQuarantine {
    pub tenant: String,
    /// RFC 3339, when it was done.
    pub at: String,
    /// The impaired cells it held, of how many, and the tenants chance would have put there.
    pub covers: usize,
    pub impaired: usize,
    pub by_chance: f64,
    /// `None`: done; else why it was not (the write or the check refused it).
    pub error: Option<String>,
}

static DONE: Mutex<Vec<AutoQuarantine>> = Mutex::new(Vec::new());
/// Most entries kept.
const KEEP: usize = 20;

/// What automatic quarantine did since start, oldest first (at most 20).
pub fn done() -> Vec<AutoQuarantine> {
    DONE.lock().map(|d| d.clone()).unwrap_or_default()
}

/// The thread's body: every [`LOOK_EVERY`] until `sleep` says stop.
pub fn run(
    reloader: Arc<Reloader>,
    stores: Box<TenantStores>,
) -> impl FnOnce(&dyn Fn(Duration) -> bool) + Send {
    move |sleep| {
        let mut seen: Weak<ImpairedCells> = Weak::new();
        loop {
            look(&reloader, stores.as_ref(), &mut seen);
            if sleep(LOOK_EVERY) {
                return;
            }
        }
    }
}

/// One look: blame the impaired cells in service if they are new, and quarantine whom it names.
fn look(reloader: &Reloader, stores: &TenantStores, seen: &mut Weak<ImpairedCells>) {
    let snapshot = reloader.snapshot().load_full();
    let Some(policies) = snapshot.policies() else {
        return;
    };
    // Drained, probe-down and hot cells alike: blame looks at whatever leaves cells out.
    let Some(impaired) = crate::snapshot::impaired::now(&snapshot) else {
        *seen = Weak::new();
        return;
    };
    if std::ptr::eq(seen.as_ptr(), Arc::as_ptr(&impaired)) {
        return;
    }
    *seen = Arc::downgrade(&impaired);
    let Some(blame) = reloader.tenants().blame(policies, &impaired) else {
        return;
    };
    for tenant in named(&blame) {
        let error = quarantine(reloader, stores, tenant).err();
        match &error {
            None => tracing::warn!(
                "tenant {tenant} quarantined by blame: its shards hold all {} impaired cells \
                 ({:.3} tenants would by chance)",
                blame.impaired,
                blame.by_chance
            ),
            Some(e) => tracing::error!("tenant {tenant}: automatic quarantine failed: {e}"),
        }
        record(AutoQuarantine {
            tenant: tenant.to_string(),
            at: crate::rfc3339::format_utc(std::time::SystemTime::now()),
            covers: blame.best_cover,
            impaired: blame.impaired,
            by_chance: blame.by_chance,
            error: error.map(|e| e.to_string()),
        });
    }
}

/// The tenants a blame names: none unless its verdict is `named`; then the suspects holding
/// every impaired cell.
pub fn named(blame: &Blame) -> Vec<&str> {
    if blame.verdict != Verdict::Named {
        return Vec::new();
    }
    blame
        .suspects
        .iter()
        .filter(|s| s.covers == blame.impaired)
        .map(|s| s.tenant.as_str())
        .collect()
}

/// Sets `tenant`'s document's state to quarantined through the one tenant write path.
fn quarantine(
    reloader: &Reloader,
    stores: &TenantStores,
    tenant: &str,
) -> Result<(), QuarantineError> {
    let config = reloader.source().read_config()?;
    let (store, staged) = stores(&config).map_err(QuarantineError::Stores)?;
    let key = tenant_key(tenant);
    let current = store
        .current(&key)?
        .ok_or_else(|| QuarantineError::NoDocument(key.clone()))?;
    let text = crate::tenant::edit::set_state(&current.text, TenantState::Quarantined)?;
    let author = Author {
        source: "automatic quarantine (blame)".into(),
        ..Default::default()
    };
    let write = || store.compare_and_write(&key, current.revision, &text, &author);
    let registry = reloader.tenants();
    let outcome = if staged {
        registry.put_staged(tenant, &text, write)
    } else {
        registry.put(tenant, &text, write)
    };
    Ok(outcome.map(drop)?)
}

fn record(entry: AutoQuarantine) {
    if let Ok(mut done) = DONE.lock() {
        done.push(entry);
        let over = done.len().saturating_sub(KEEP);
        done.drain(..over);
    }
}
