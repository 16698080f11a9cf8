//! The `cells` block of `/v1/status` and the cell series of `/metrics` (issue 31): the cells
//! left out of tenants' answers (drained in the control file), and blame — which tenants'
//! shards hold the impaired cells, with how many would by chance
//! ([`crate::cells::blame`]). Absent while no cell is impaired.

use serde::{Deserialize, Serialize};

use crate::cells::blame::{Blame, ImpairedCell};
use crate::cells::LayerRef;
use crate::policy::CompiledPolicies;
use crate::reload::tenants::TenantRegistry;

/// One impaired cell, named as the control file names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImpairedCellView {
    /// `global`, a region's or a fallback site's name.
    pub layer: String,
    pub cell: String,
    /// Why it is left out (today always `drained`: the operator's control file).
    pub reason: String,
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

/// The block for the policies in service; `None` while no cell is impaired.
pub fn view(policies: Option<&CompiledPolicies>, tenants: &TenantRegistry) -> Option<CellsView> {
    let policies = policies?;
    let impaired = policies.impaired_cells()?;
    let topology = policies.cells()?;
    let named = impaired
        .cells()
        .iter()
        .filter_map(|c| cell_view(policies, topology, c))
        .collect();
    let blame = tenants.blame(policies, impaired).map(|b| blame_view(&b));
    Some(CellsView {
        impaired: named,
        blame,
        auto_quarantined: crate::reload::quarantine::done(),
    })
}

fn cell_view(
    policies: &CompiledPolicies,
    topology: &crate::cells::CellTopology,
    cell: &ImpairedCell,
) -> Option<ImpairedCellView> {
    let layer = match cell.layer {
        LayerRef::Global => "global".to_owned(),
        LayerRef::Region(r) => policies.regions().get(r as usize)?.name.clone(),
        LayerRef::Site(s) => policies.fallback_sites().get(s as usize)?.name.clone(),
    };
    let name = topology
        .layer(cell.layer)?
        .cells()
        .get(cell.cell as usize)?
        .name
        .clone();
    Some(ImpairedCellView {
        layer,
        cell: name,
        reason: "drained".to_owned(),
    })
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
