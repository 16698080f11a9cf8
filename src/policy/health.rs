//! The health view: what the monitors currently say about each monitored target, as the policy
//! reads it per query. Plain immutable data, built whole by the prober (`crate::health`) and
//! published behind an atomic pointer; the policy never waits for it or writes it.

/// One monitored target's state in a [`HealthView`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotHealth {
    /// Whether it is served as up (unknown before the first check counts as up).
    pub up: bool,
    /// The view generation in which it was last up (0: never). Among candidates that are all
    /// down, the ones with the largest value are the "last healthy" ones.
    pub last_up: u64,
}

impl Default for SlotHealth {
    fn default() -> Self {
        SlotHealth {
            up: true,
            last_up: 0,
        }
    }
}

/// Health of every monitor target, indexed by the slot numbers of
/// [`super::CompiledPolicies::monitors`]. A slot that the view does not have counts as up
/// (a view built for other policies never takes endpoints out).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HealthView {
    slots: Vec<SlotHealth>,
    /// The cells whose probe is down (their slots' state, gathered when the view is built so
    /// that a tenant's answer compares addresses, not slots); `None`: none.
    cells: Option<std::sync::Arc<crate::cells::ImpairedCells>>,
}

impl HealthView {
    /// The view in which every target is up (it has no slots).
    pub const fn all_up() -> HealthView {
        HealthView {
            slots: Vec::new(),
            cells: None,
        }
    }

    /// A view of these slots.
    pub fn new(slots: Vec<SlotHealth>) -> HealthView {
        HealthView { slots, cells: None }
    }

    /// This view, with the cells of `probes` (cell, slot: what
    /// [`super::CompiledPolicies::cell_monitors`] lists) whose slot is down as its cells down.
    pub fn with_cells(
        mut self,
        topology: &crate::cells::CellTopology,
        probes: &[(crate::cells::blame::ImpairedCell, u16)],
    ) -> HealthView {
        use crate::cells::{ImpairedCells, Why};
        let down: Vec<_> = probes
            .iter()
            .filter(|(_, slot)| !self.up(*slot))
            .map(|(cell, _)| *cell)
            .collect();
        self.cells = (!down.is_empty())
            .then(|| std::sync::Arc::new(ImpairedCells::because(topology, &down, Why::ProbeDown)));
        self
    }

    /// The same set, shared (for status and blame).
    pub fn cells_shared(&self) -> Option<&std::sync::Arc<crate::cells::ImpairedCells>> {
        self.cells.as_ref()
    }

    /// The cells whose probe is down, if any.
    #[inline]
    pub fn cells(&self) -> Option<&crate::cells::ImpairedCells> {
        self.cells.as_deref()
    }

    /// Whether the target in `slot` is served as up.
    pub fn up(&self, slot: u16) -> bool {
        self.slots.get(usize::from(slot)).is_none_or(|s| s.up)
    }

    /// The generation in which the target in `slot` was last up (`u64::MAX` when the view
    /// does not have the slot, which counts as up now).
    pub fn last_up(&self, slot: u16) -> u64 {
        self.slots
            .get(usize::from(slot))
            .map_or(u64::MAX, |s| if s.up { u64::MAX } else { s.last_up })
    }

    /// The slots, in order.
    pub fn slots(&self) -> &[SlotHealth] {
        &self.slots
    }
}

/// A tenant's own monitors (`[monitors.NAME]` in its document) and what they say, as its
/// answers read them: built by the tenant's compilation, then attached to the prober
/// (`crate::health::tenants`), which swaps in a new view whole at every change of state. A
/// tenant's profile numbers its own monitors from `base` on (after the platform's slots): a
/// slot at or above `base` is read here, below it from the platform's view.
pub struct OwnMonitors {
    /// The first slot of the tenant's own monitors (the platform's slot count when compiled).
    pub base: u16,
    /// The tenant's monitor specs, by slot − `base`, with the `[monitors]` name that defined
    /// each (several names with the same target share one spec; the first name is kept).
    pub specs: Vec<(String, super::monitor::MonitorSpec)>,
    view: arc_swap::ArcSwap<HealthView>,
}

impl OwnMonitors {
    /// The tenant's monitors in their startup state.
    pub fn new(base: u16, specs: Vec<(String, super::monitor::MonitorSpec)>) -> OwnMonitors {
        let slots = specs
            .iter()
            .map(|(_, spec)| SlotHealth {
                up: spec.startup != super::monitor::Startup::Down,
                last_up: 0,
            })
            .collect();
        OwnMonitors {
            base,
            specs,
            view: arc_swap::ArcSwap::from_pointee(HealthView::new(slots)),
        }
    }

    /// What its monitors say now (lock-free).
    #[inline]
    pub fn view(&self) -> arc_swap::Guard<std::sync::Arc<HealthView>> {
        self.view.load()
    }

    /// Serves `view` from now on (the prober, after a change of state).
    pub fn publish(&self, view: HealthView) {
        self.view.store(std::sync::Arc::new(view));
    }

    /// Whether these are the same monitors as `other`'s (the prober keeps their states).
    pub fn same_specs(&self, other: &OwnMonitors) -> bool {
        self.specs.len() == other.specs.len()
            && self
                .specs
                .iter()
                .zip(&other.specs)
                .all(|((_, a), (_, b))| a == b)
    }
}

impl std::fmt::Debug for OwnMonitors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnMonitors")
            .field("base", &self.base)
            .field("specs", &self.specs.len())
            .finish()
    }
}
