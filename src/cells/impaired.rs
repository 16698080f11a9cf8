//! Impaired cells (issue 31, item 2: cells fail alone): which cells are left out of tenants'
//! answers, and the per-answer mask that leaves them out.
//!
//! A tenant's answer in a layer is its shard's addresses, one per cell, in cell order
//! ([`super::TenantCells::layer`]). An impaired cell is left out of every answer that still has
//! a healthy cell of that tenant's shard in the layer; when every cell of the shard is
//! impaired, [`ImpairedCells::left_out`] says so and the policy falls back a layer, as the
//! shield does (global → the client's region → a fallback site), serving the shard whole only
//! where nothing is left to fall back to (never an empty answer: an impaired cell still
//! answering beats none, as an always-serve profile serves its endpoints when all are down).
//!
//! What is impaired is decided off the serving path, by three sources ([`Why`]): the
//! operator's drains in the control file (compiled into the snapshot), the cells' own health
//! probes (carried in the health view) and their load from the feeds (hot above the high
//! watermark, carried in the shield's view). Each source's cells are an [`ImpairedCells`]:
//! per impaired layer, the impaired cells' addresses. Per query, [`left_out_of`] compares the
//! tenant's at most [`MAX_K`] addresses with each source's (short) list and returns one
//! [`LeftOut`] bit mask for their union, which the answer writers apply while writing: no
//! allocation, no lock. The mask is the same for both families: every cell of a layer has the
//! same families, so position `i` of the IPv4 and of the IPv6 list is the same cell. Off the
//! serving path, [`ImpairedCells::union`] merges the sources with every reason a cell has, for
//! status, metrics and blame. Pure and a leaf like the rest of `cells`.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::blame::ImpairedCell;
use super::{CellTopology, LayerRef, MAX_K};

/// Which positions of an address list to leave out (bit `i`: position `i`). Positions past
/// [`MAX_K`] are always kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct LeftOut(u8);

impl LeftOut {
    /// Nothing left out.
    pub const NONE: LeftOut = LeftOut(0);

    /// Whether position `i` is left out.
    #[inline]
    pub fn leaves_out(self, i: usize) -> bool {
        i < MAX_K && self.0 & (1 << i) != 0
    }

    /// Whether anything is left out.
    #[inline]
    pub fn any(self) -> bool {
        self.0 != 0
    }

    /// How many of `len` positions are kept.
    #[inline]
    pub fn kept(self, len: usize) -> usize {
        // The bits of the first `len` positions (all of them past MAX_K), counted at once.
        let mask = if len >= MAX_K {
            u8::MAX
        } else {
            (1u8 << len) - 1
        };
        len - (self.0 & mask).count_ones() as usize
    }

    /// The items of `list` kept, in order.
    #[inline]
    pub fn keep<T>(self, list: &[T]) -> impl Iterator<Item = &T> + '_ {
        list.iter()
            .enumerate()
            .filter(move |(i, _)| !self.leaves_out(*i))
            .map(|(_, item)| item)
    }
}

/// Why a cell is impaired: the source that says so.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Why {
    /// The operator drained it (control file, CLI, API).
    Drained,
    /// Its health probe says it is down.
    ProbeDown,
    /// Its load from the feed is above the high watermark (and not yet below the low one).
    Hot,
}

impl Why {
    pub const ALL: [Why; 3] = [Why::Drained, Why::ProbeDown, Why::Hot];

    /// As status, metrics and explanations spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Why::Drained => "drained",
            Why::ProbeDown => "probe-down",
            Why::Hot => "hot",
        }
    }

    fn bit(self) -> u8 {
        match self {
            Why::Drained => 1,
            Why::ProbeDown => 2,
            Why::Hot => 4,
        }
    }
}

/// The set of reasons one cell is impaired for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Reasons(u8);

impl Reasons {
    /// Only `why`.
    pub fn of(why: Why) -> Reasons {
        Reasons(why.bit())
    }

    pub fn has(self, why: Why) -> bool {
        self.0 & why.bit() != 0
    }

    /// The reasons, in [`Why::ALL`] order.
    pub fn iter(self) -> impl Iterator<Item = Why> {
        Why::ALL.into_iter().filter(move |w| self.has(*w))
    }

    fn add(&mut self, other: Reasons) {
        self.0 |= other.0;
    }
}

/// The impaired cells of one layer, by address.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ImpairedLayer {
    at: LayerRef,
    v4: Vec<Ipv4Addr>,
    v6: Vec<Ipv6Addr>,
}

/// Every impaired cell, by layer and by address, as the serving path reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImpairedCells {
    layers: Vec<ImpairedLayer>,
    /// The same cells by position, for status and blame.
    cells: Vec<ImpairedCell>,
    /// Per cell of `cells`: why it is impaired.
    reasons: Vec<Reasons>,
}

impl ImpairedCells {
    /// The impaired `cells` of `topology` (cells it does not have are ignored; duplicates
    /// count once).
    /// (Each is impaired for `why`; see [`ImpairedCells::because`].)
    pub fn new(topology: &CellTopology, cells: &[ImpairedCell]) -> ImpairedCells {
        ImpairedCells::because(topology, cells, Why::Drained)
    }

    /// The impaired `cells` of `topology`, each for `why`.
    pub fn because(topology: &CellTopology, cells: &[ImpairedCell], why: Why) -> ImpairedCells {
        let mut out = ImpairedCells::default();
        for cell in cells {
            out.add(topology, *cell, Reasons::of(why));
        }
        out
    }

    /// The union of `sources` (each `None` or a set of `topology`'s cells), every cell once
    /// with all its reasons, in the order first seen. Off the serving path: allocates.
    pub fn union<'a>(
        topology: &CellTopology,
        sources: impl IntoIterator<Item = Option<&'a ImpairedCells>>,
    ) -> ImpairedCells {
        let mut out = ImpairedCells::default();
        for source in sources.into_iter().flatten() {
            for (cell, reasons) in source.cells.iter().zip(&source.reasons) {
                out.add(topology, *cell, *reasons);
            }
        }
        out
    }

    /// Adds one cell (nothing when `topology` has no such cell; its reasons only when it is
    /// here already).
    fn add(&mut self, topology: &CellTopology, cell: ImpairedCell, reasons: Reasons) {
        let Some(found) = topology
            .layer(cell.layer)
            .and_then(|l| l.cells().get(usize::from(cell.cell)))
        else {
            return;
        };
        if let Some(at) = self.cells.iter().position(|c| *c == cell) {
            self.reasons[at].add(reasons);
            return;
        }
        self.cells.push(cell);
        self.reasons.push(reasons);
        let at = match self.layers.iter().position(|l| l.at == cell.layer) {
            Some(i) => i,
            None => {
                self.layers.push(ImpairedLayer {
                    at: cell.layer,
                    v4: Vec::new(),
                    v6: Vec::new(),
                });
                self.layers.len() - 1
            }
        };
        let layer = &mut self.layers[at];
        layer.v4.extend(found.v4);
        layer.v6.extend(found.v6);
    }

    /// Whether no cell is impaired.
    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }

    /// The impaired cells, in the order given.
    pub fn cells(&self) -> &[ImpairedCell] {
        &self.cells
    }

    /// The impaired cells with why each is impaired.
    pub fn with_reasons(&self) -> impl Iterator<Item = (ImpairedCell, Reasons)> + '_ {
        self.cells.iter().copied().zip(self.reasons.iter().copied())
    }

    /// Why `cell` is impaired (`None`: it is not).
    pub fn reasons(&self, cell: ImpairedCell) -> Option<Reasons> {
        let at = self.cells.iter().position(|c| *c == cell)?;
        self.reasons.get(at).copied()
    }

    /// The positions of a tenant's addresses in layer `at` that are impaired here (bit `i`:
    /// position `i`). Never allocates.
    #[inline]
    fn mask(&self, at: LayerRef, v4: &[Ipv4Addr], v6: &[Ipv6Addr]) -> u8 {
        let Some(layer) = self.layers.iter().find(|l| l.at == at) else {
            return 0;
        };
        let mut mask = 0u8;
        for i in 0..v4.len().max(v6.len()).min(MAX_K) {
            let impaired = match (v4.get(i), v6.get(i)) {
                (Some(a), _) => layer.v4.contains(a),
                (None, Some(a)) => layer.v6.contains(a),
                (None, None) => false,
            };
            if impaired {
                mask |= 1 << i;
            }
        }
        mask
    }

    /// What to leave out of a tenant's answer in layer `at` (its shard's addresses `v4`,
    /// `v6`): the impaired cells; `None` when that would leave nothing (every cell of the
    /// shard impaired). Never allocates.
    #[inline]
    pub fn left_out(&self, at: LayerRef, v4: &[Ipv4Addr], v6: &[Ipv6Addr]) -> Option<LeftOut> {
        left_out_of([Some(self)], at, v4, v6)
    }
}

/// What to leave out of a tenant's answer in layer `at` (its shard's addresses `v4`, `v6`):
/// the cells any of `sources` impairs; `None` when that would leave nothing (every cell of
/// the shard impaired by one source or another). Never allocates.
#[inline]
pub fn left_out_of<const N: usize>(
    sources: [Option<&ImpairedCells>; N],
    at: LayerRef,
    v4: &[Ipv4Addr],
    v6: &[Ipv6Addr],
) -> Option<LeftOut> {
    let mask = sources
        .iter()
        .flatten()
        .fold(0u8, |mask, s| mask | s.mask(at, v4, v6));
    let len = v4.len().max(v6.len()).min(MAX_K);
    let all = if len == MAX_K {
        u8::MAX
    } else {
        (1u8 << len) - 1
    };
    (len == 0 || mask != all).then_some(LeftOut(mask))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cells::{Cell, Layer};

    fn topology(cells: u16, k: usize) -> CellTopology {
        let cells = (0..cells)
            .map(|i| Cell {
                name: format!("g{i}"),
                v4: Some(Ipv4Addr::new(192, 0, 2, i as u8)),
                v6: Some(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, i)),
            })
            .collect();
        let global = Layer::new("global", cells).unwrap_or_else(|e| panic!("{e}"));
        CellTopology::new(Some(global), vec![], vec![], k).unwrap_or_else(|e| panic!("{e}"))
    }

    fn impaired(topology: &CellTopology, cells: &[u16]) -> ImpairedCells {
        let cells: Vec<ImpairedCell> = cells
            .iter()
            .map(|&cell| ImpairedCell {
                layer: LayerRef::Global,
                cell,
            })
            .collect();
        ImpairedCells::new(topology, &cells)
    }

    #[test]
    fn an_impaired_cell_is_left_out_of_the_tenants_that_have_it_and_only_those() {
        let topology = topology(8, 3);
        let drained = impaired(&topology, &[2]);
        let drained_v4 = Ipv4Addr::new(192, 0, 2, 2);
        let mut with = 0;
        for t in 0..200 {
            let cells = topology.assign(&format!("t{t}"), None);
            let (v4, v6) = cells.layer(LayerRef::Global).unwrap_or_default();
            let mask = drained
                .left_out(LayerRef::Global, v4, v6)
                .unwrap_or_else(|| panic!("t{t}: one of 8 impaired"));
            let kept4: Vec<_> = mask.keep(v4).copied().collect();
            let kept6: Vec<_> = mask.keep(v6).copied().collect();
            if v4.contains(&drained_v4) {
                with += 1;
                assert_eq!(kept4.len(), 2, "t{t}: {v4:?} less the drained cell");
                assert!(!kept4.contains(&drained_v4));
                assert!(!kept6.contains(&Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 2)));
                assert_eq!(mask.kept(v4.len()), 2);
            } else {
                assert_eq!(mask, LeftOut::NONE, "t{t} does not have the cell");
                assert_eq!(kept4, v4);
            }
        }
        assert!(with > 0, "some tenant has cell 2 in its shard");
        // Another layer is untouched.
        let (v4, v6) = (&[drained_v4][..], &[][..]);
        assert_eq!(
            drained.left_out(LayerRef::Region(0), v4, v6),
            Some(LeftOut::NONE)
        );
    }

    #[test]
    fn a_shard_with_every_cell_impaired_is_reported_as_such() {
        let topology = topology(4, 2);
        let cells = topology.assign("victim", None);
        let (v4, v6) = cells.layer(LayerRef::Global).unwrap_or_default();
        let shard: Vec<u16> = v4.iter().map(|a| u16::from(a.octets()[3])).collect();
        let drained = impaired(&topology, &shard);
        assert_eq!(drained.left_out(LayerRef::Global, v4, v6), None);
        // One of the two impaired: the other serves alone.
        let one = impaired(&topology, &shard[..1]);
        let mask = one
            .left_out(LayerRef::Global, v4, v6)
            .unwrap_or_else(|| panic!("one of two impaired"));
        assert_eq!(mask.keep(v4).count(), 1);
        assert_eq!(mask.keep(v4).next(), v4.get(1));
    }

    #[test]
    fn unknown_and_duplicate_cells_are_ignored() {
        let topology = topology(4, 2);
        let drained = impaired(&topology, &[1, 1, 99]);
        assert_eq!(drained.cells().len(), 1);
        assert!(impaired(&topology, &[]).is_empty());
    }

    #[test]
    fn left_out_counts_and_keeps_in_order() {
        let mask = LeftOut(0b0101);
        assert!(mask.any());
        assert_eq!(mask.kept(4), 2);
        assert_eq!(
            mask.keep(&[0, 1, 2, 3]).copied().collect::<Vec<_>>(),
            [1, 3]
        );
        assert_eq!(mask.kept(10), 8, "positions past MAX_K are kept");
        assert!(!LeftOut::NONE.any());
    }

    #[test]
    fn sources_are_left_out_together_and_their_union_keeps_every_reason() {
        let topology = topology(4, 2);
        let cells = topology.assign("victim", None);
        let (v4, v6) = cells.layer(LayerRef::Global).unwrap_or_default();
        let shard: Vec<u16> = v4.iter().map(|a| u16::from(a.octets()[3])).collect();
        let at = |cell| ImpairedCell {
            layer: LayerRef::Global,
            cell,
        };
        let drained = ImpairedCells::because(&topology, &[at(shard[0])], Why::Drained);
        let down = ImpairedCells::because(&topology, &[at(shard[0])], Why::ProbeDown);
        let hot = ImpairedCells::because(&topology, &[at(shard[1])], Why::Hot);
        // One cell left out by two sources: the other serves.
        let mask = left_out_of(
            [Some(&drained), Some(&down), None],
            LayerRef::Global,
            v4,
            v6,
        )
        .unwrap_or_else(|| panic!("one of two impaired"));
        assert_eq!(mask.keep(v4).collect::<Vec<_>>(), [&v4[1]]);
        // Both cells, by different sources: every cell impaired, the caller falls back.
        assert_eq!(
            left_out_of([Some(&drained), None, Some(&hot)], LayerRef::Global, v4, v6),
            None
        );
        let union = ImpairedCells::union(&topology, [Some(&drained), Some(&down), Some(&hot)]);
        assert_eq!(union.cells(), [at(shard[0]), at(shard[1])]);
        let first = union.reasons(at(shard[0])).unwrap_or_default();
        assert_eq!(
            first.iter().collect::<Vec<_>>(),
            [Why::Drained, Why::ProbeDown]
        );
        assert_eq!(
            union
                .reasons(at(shard[1]))
                .map(|r| r.iter().collect::<Vec<_>>()),
            Some(vec![Why::Hot])
        );
        assert_eq!(union.left_out(LayerRef::Global, v4, v6), None);
    }
}
