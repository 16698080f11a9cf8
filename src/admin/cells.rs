//! The `cells` block of `/v1/status` and the cell series of `/metrics` (issue 31): the cells
//! left out of tenants' answers and why (drained in the control file, probe down, hot by its
//! load), and blame — which tenants' shards hold the impaired cells, with how many would by
//! chance ([`crate::cells::blame`]). Absent while no cell is impaired.
//!
//! The three sources are merged off the serving path by [`crate::snapshot::impaired`] (the
//! same union automatic quarantine blames).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::cells::blame::{Blame, ImpairedCell};
use crate::cells::{ImpairedCells, Reasons, Why};
use crate::policy::CompiledPolicies;
use crate::reload::tenants::TenantRegistry;
use crate::shield::live::CellLoadStatus;

/// One impaired cell, named as the control file names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImpairedCellView {
    /// `global`, a region's or a fallback site's name.
    pub layer: String,
    pub cell: String,
    /// Why it is left out: `drained` (the operator's control file), `probe-down` (its health
    /// probe), `hot` (its load in the feed), several joined by `+`.
    pub reason: String,
    /// `probe-down`: the target its probe checks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
    /// `hot`: its utilisation at the last fresh reading.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilisation: Option<f64>,
}

/// The live sources of impaired cells besides the snapshot's drains: the cells whose probe
/// is down (the health view) and the cells hot by their load (the shield's view), with the
/// cells' loads as the shield's status shows them.
#[derive(Default)]
pub struct LiveCells {
    pub down: Option<Arc<ImpairedCells>>,
    pub hot: Option<Arc<ImpairedCells>>,
    pub loads: Vec<CellLoadStatus>,
}

impl LiveCells {
    /// What the snapshot's health board and the shield serve now.
    pub fn of(snapshot: &crate::snapshot::Snapshot) -> LiveCells {
        let (down, hot) = crate::snapshot::impaired::live(snapshot);
        LiveCells {
            down,
            hot,
            loads: snapshot.shield().status().cells,
        }
    }
}

/// A tenant under suspicion.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SuspectView {
    pub tenant: String,
    /// How many impaired cells its shards hold.
    pub covers: usize,
}

/// Blame over the impaired cells.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BlameView {
    /// `named`, `ambiguous`, `no-common-factor` or `too-few-cells`.
    pub verdict: String,
    /// Impaired cells considered, and tenants looked at.
    pub impaired: usize,
    pub tenants: usize,
    /// The most impaired cells any one tenant's shards hold, and how many tenants hold that
    /// many (the suspects listed are at most [`crate::reload::tenants::BLAME_LIMIT`] of them).
    pub best_cover: usize,
    pub tied: usize,
    /// Tenants expected to hold every impaired cell by chance: the noise floor.
    pub by_chance: f64,
    pub suspects: Vec<SuspectView>,
}

/// The cells block.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellsView {
    pub impaired: Vec<ImpairedCellView>,
    /// `None` when the platform has no tenant registry to blame.
    #[serde(default)]
    pub blame: Option<BlameView>,
    /// `[tenants] auto_quarantine`: the tenants blame quarantined by itself since start.
    #[serde(default)]
    pub auto_quarantined: Vec<crate::reload::quarantine::AutoQuarantine>,
}

/// The block for the policies in service and the `live` sources; `None` while no cell is
/// impaired.
pub fn view(
    policies: Option<&CompiledPolicies>,
    live: &LiveCells,
    tenants: &TenantRegistry,
) -> Option<CellsView> {
    let policies = policies?;
    let sources = [
        policies.impaired_cells(),
        live.down.as_ref(),
        live.hot.as_ref(),
    ];
    let impaired = crate::snapshot::impaired::union_of(policies, sources)?;
    let named = impaired
        .with_reasons()
        .filter_map(|(c, why)| cell_view(policies, live, c, why))
        .collect();
    let blame = tenants.blame(policies, &impaired).map(|b| blame_view(&b));
    Some(CellsView {
        impaired: named,
        blame,
        auto_quarantined: crate::reload::quarantine::done(),
    })
}

fn cell_view(
    policies: &CompiledPolicies,
    live: &LiveCells,
    cell: ImpairedCell,
    why: Reasons,
) -> Option<ImpairedCellView> {
    let (layer, name) = policies.cell_name(cell)?;
    let probe = why
        .has(Why::ProbeDown)
        .then(|| probe_of(policies, cell))
        .flatten();
    let utilisation = why
        .has(Why::Hot)
        .then(|| {
            live.loads
                .iter()
                .find(|l| l.layer == layer && l.cell == name)
                .and_then(|l| l.utilisation)
        })
        .flatten();
    Some(ImpairedCellView {
        layer: layer.to_owned(),
        cell: name.to_owned(),
        reason: reason_text(why),
        probe,
        utilisation,
    })
}

/// Reasons as status writes them: `drained`, `probe-down`, `hot`, joined by `+`.
pub fn reason_text(why: Reasons) -> String {
    why.iter().map(Why::as_str).collect::<Vec<_>>().join("+")
}

/// The target a cell's probe checks.
fn probe_of(policies: &CompiledPolicies, cell: ImpairedCell) -> Option<String> {
    let (_, slot) = policies.cell_monitors().iter().find(|(c, _)| *c == cell)?;
    Some(policies.monitors().get(usize::from(*slot))?.target.clone())
}

fn blame_view(blame: &Blame) -> BlameView {
    BlameView {
        verdict: blame.verdict.as_str().to_owned(),
        impaired: blame.impaired,
        tenants: blame.tenants,
        best_cover: blame.best_cover,
        tied: blame.tied,
        by_chance: blame.by_chance,
        suspects: blame
            .suspects
            .iter()
            .map(|s| SuspectView {
                tenant: s.tenant.clone(),
                covers: s.covers,
            })
            .collect(),
    }
}
