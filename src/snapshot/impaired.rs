//! The cells impaired now, from all three sources: the control file's drains (compiled into
//! the policies), the cells whose probe is down (the health view) and the cells hot by their
//! load (the shield's view), merged off the serving path ([`ImpairedCells::union`]). The union
//! is kept while its sources stay the same values, so that status reads and automatic
//! quarantine (which both blame it) see one `Arc` per set and blame's memo holds.

use std::sync::{Arc, Mutex, Weak};

use crate::cells::ImpairedCells;
use crate::policy::CompiledPolicies;

use super::Snapshot;

/// The last union built, with its sources (weak: a memo must not keep old sets alive).
struct UnionMemo {
    sources: [Option<Weak<ImpairedCells>>; 3],
    union: Arc<ImpairedCells>,
}

static UNION: Mutex<Option<UnionMemo>> = Mutex::new(None);

/// The union of the three sources, the same `Arc` while they are the same values.
pub fn union_of(
    policies: &CompiledPolicies,
    sources: [Option<&Arc<ImpairedCells>>; 3],
) -> Option<Arc<ImpairedCells>> {
    let topology = policies.cells()?;
    let mut memo = UNION.lock().unwrap_or_else(|p| p.into_inner());
    let same = |m: &&UnionMemo| {
        m.sources
            .iter()
            .zip(sources)
            .all(|(kept, now)| match (kept, now) {
                (None, None) => true,
                (Some(kept), Some(now)) => std::ptr::eq(kept.as_ptr(), Arc::as_ptr(now)),
                _ => false,
            })
    };
    if let Some(m) = memo.as_ref().filter(same) {
        return (!m.union.is_empty()).then(|| m.union.clone());
    }
    let union = Arc::new(ImpairedCells::union(
        topology,
        sources.iter().map(|s| s.map(|s| &**s)),
    ));
    *memo = Some(UnionMemo {
        sources: sources.map(|s| s.map(Arc::downgrade)),
        union: union.clone(),
    });
    (!union.is_empty()).then_some(union)
}

/// The cells impaired now under `snapshot`'s policies, health board and shield (`None` while
/// none is).
pub fn now(snapshot: &Snapshot) -> Option<Arc<ImpairedCells>> {
    let policies = snapshot.policies()?;
    let (down, hot) = live(snapshot);
    union_of(
        policies,
        [policies.impaired_cells(), down.as_ref(), hot.as_ref()],
    )
}

/// The two live sources besides the drains: the cells whose probe is down (the health
/// view) and the cells hot by their load (the shield's view).
pub fn live(snapshot: &Snapshot) -> (Option<Arc<ImpairedCells>>, Option<Arc<ImpairedCells>>) {
    (
        snapshot.health().view().cells_shared().cloned(),
        snapshot.shield().view().cells_shared().cloned(),
    )
}
