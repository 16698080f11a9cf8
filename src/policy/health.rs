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
}

impl HealthView {
    /// The view in which every target is up (it has no slots).
    pub const fn all_up() -> HealthView {
        HealthView { slots: Vec::new() }
    }

    /// A view of these slots.
    pub fn new(slots: Vec<SlotHealth>) -> HealthView {
        HealthView { slots }
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
