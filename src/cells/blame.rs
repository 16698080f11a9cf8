//! Blame: which tenants' shards explain a set of impaired cells (issue 31, item 4).
//!
//! A tenant whose traffic hurts the platform impairs the cells its answers send clients to:
//! its shard. When several cells are impaired at once, the tenants whose shards hold all (or
//! the most) of them are the common factor; with shuffle sharding there are few of them, and
//! fewer the more layers and cells are involved. Owns that computation and the honest number
//! next to it: how many tenants would cover the same cells *by chance* ([`Blame::by_chance`]),
//! so that a verdict on one layer of 16 cells and k = 2 (one tenant in 120 shares any given
//! pair) is shown as the crowd it is, not as a name.
//!
//! Pure and a leaf like the rest of `cells`: shards are recomputed from the topology (a
//! rendezvous pass per impaired layer per tenant, off the serving path, when the impaired
//! set changes), so it needs no compiled tenant state.

use super::{choose, CellTopology, LayerRef};

/// One impaired cell: its layer and its index in that layer's cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImpairedCell {
    pub layer: LayerRef,
    pub cell: u16,
}

/// One tenant under suspicion.
#[derive(Debug, Clone, PartialEq)]
pub struct Suspect {
    pub tenant: String,
    /// How many of the impaired cells its shards hold.
    pub covers: usize,
    /// Its load share when the caller knows one (ranks suspects that cover equally).
    pub load: Option<f64>,
}

/// What blame concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Fewer than two impaired cells: any tenant on one cell is as likely as the next.
    TooFewCells,
    /// No tenant holds two or more of the impaired cells: they fail independently (a
    /// platform problem, not a tenant's).
    NoCommonFactor,
    /// The suspects hold every impaired cell and chance explains less than one other tenant
    /// doing so: they are named.
    Named,
    /// Suspects exist but chance could put as many innocent tenants on the same cells (too
    /// few cells or layers impaired to tell them apart).
    Ambiguous,
}

impl Verdict {
    pub const ALL: [Verdict; 4] = [
        Verdict::Named,
        Verdict::Ambiguous,
        Verdict::NoCommonFactor,
        Verdict::TooFewCells,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::TooFewCells => "too-few-cells",
            Verdict::NoCommonFactor => "no-common-factor",
            Verdict::Named => "named",
            Verdict::Ambiguous => "ambiguous",
        }
    }
}

/// The result: the suspects (best first, at most the limit asked for), how many tenants tie
/// with them, and how many would by chance.
#[derive(Debug, Clone, PartialEq)]
pub struct Blame {
    pub verdict: Verdict,
    /// Impaired cells considered (those of layers the topology has).
    pub impaired: usize,
    /// Tenants looked at.
    pub tenants: usize,
    /// The most impaired cells any one tenant's shards hold.
    pub best_cover: usize,
    /// Tenants holding `best_cover` cells (all of them, however many are listed).
    pub tied: usize,
    /// Expected number of tenants, among those looked at, whose shards would hold every
    /// impaired cell if shards were drawn at random: the noise floor of a `Named` verdict.
    pub by_chance: f64,
    pub suspects: Vec<Suspect>,
}

/// Blames tenants for `impaired` cells. `tenants` yields each tenant's name, its k (`None`:
/// the topology's default) and optionally its load share. At most `limit` suspects are
/// listed; `tied` counts them all. Impaired cells of layers the topology does not have (or
/// past a layer's end) are ignored.
pub fn blame<'t>(
    topology: &CellTopology,
    impaired: &[ImpairedCell],
    tenants: impl IntoIterator<Item = (&'t str, Option<usize>, Option<f64>)>,
    limit: usize,
) -> Blame {
    let layers = by_layer(topology, impaired);
    let impaired_count: usize = layers.iter().map(|(_, cells)| cells.len()).sum();
    let mut seen = 0usize;
    let mut best_cover = 0usize;
    let mut tied = 0usize;
    let mut suspects: Vec<Suspect> = Vec::new();
    let mut chance_per_tenant_by_k: Vec<(usize, f64)> = Vec::new();
    let mut by_chance = 0.0;
    for (tenant, k, load) in tenants {
        seen += 1;
        let k = k.unwrap_or(topology.k());
        let p = match chance_per_tenant_by_k.iter().find(|(kk, _)| *kk == k) {
            Some((_, p)) => *p,
            None => {
                let p = chance_of_cover(topology, &layers, k);
                chance_per_tenant_by_k.push((k, p));
                p
            }
        };
        by_chance += p;
        if impaired_count < 2 {
            continue;
        }
        let covers = cover(topology, &layers, tenant, k);
        if covers < 2 || covers < best_cover {
            continue;
        }
        if covers > best_cover {
            best_cover = covers;
            tied = 0;
            suspects.clear();
        }
        tied += 1;
        suspects.push(Suspect {
            tenant: tenant.to_string(),
            covers,
            load,
        });
        if suspects.len() > limit.saturating_mul(4).max(64) {
            rank(&mut suspects);
            suspects.truncate(limit);
        }
    }
    rank(&mut suspects);
    suspects.truncate(limit);
    // `by_chance` counts the suspects too (each is a tenant like the others): below one, even
    // the whole population would not be expected to put a single tenant on all these cells.
    let verdict = if impaired_count < 2 {
        Verdict::TooFewCells
    } else if best_cover < 2 {
        Verdict::NoCommonFactor
    } else if best_cover == impaired_count && by_chance < 1.0 && tied <= limit {
        Verdict::Named
    } else {
        Verdict::Ambiguous
    };
    Blame {
        verdict,
        impaired: impaired_count,
        tenants: seen,
        best_cover,
        tied,
        by_chance,
        suspects,
    }
}

/// Highest load first (unknown last), then by name: a stable order for status and tests.
fn rank(suspects: &mut [Suspect]) {
    suspects.sort_by(|a, b| {
        let load = |s: &Suspect| s.load.unwrap_or(f64::NEG_INFINITY);
        load(b)
            .total_cmp(&load(a))
            .then_with(|| a.tenant.cmp(&b.tenant))
    });
}

/// The impaired cells grouped by layer, each layer's ascending and without duplicates; cells
/// the topology does not have are dropped.
fn by_layer(topology: &CellTopology, impaired: &[ImpairedCell]) -> Vec<(LayerRef, Vec<u16>)> {
    let mut layers: Vec<(LayerRef, Vec<u16>)> = Vec::new();
    for cell in impaired {
        let Some(layer) = topology.layer(cell.layer) else {
            continue;
        };
        if usize::from(cell.cell) >= layer.cells().len() {
            continue;
        }
        match layers.iter_mut().find(|(at, _)| *at == cell.layer) {
            Some((_, cells)) => cells.push(cell.cell),
            None => layers.push((cell.layer, vec![cell.cell])),
        }
    }
    for (_, cells) in &mut layers {
        cells.sort_unstable();
        cells.dedup();
    }
    layers
}

/// How many of the impaired cells `tenant`'s shards hold.
fn cover(
    topology: &CellTopology,
    layers: &[(LayerRef, Vec<u16>)],
    tenant: &str,
    k: usize,
) -> usize {
    layers
        .iter()
        .filter_map(|(at, cells)| {
            let shard = topology.layer(*at)?.shard(tenant, k);
            Some(
                cells
                    .iter()
                    .filter(|c| shard.cells().binary_search(c).is_ok())
                    .count(),
            )
        })
        .sum()
}

/// The probability that a random shard of k cells per layer holds every impaired cell:
/// per layer of C cells with i impaired, C(C−i, k−i)/C(C, k) (0 when i > k), multiplied
/// over layers (layers draw independently).
fn chance_of_cover(topology: &CellTopology, layers: &[(LayerRef, Vec<u16>)], k: usize) -> f64 {
    layers
        .iter()
        .filter_map(|(at, cells)| {
            let c = topology.layer(*at)?.cells().len() as u64;
            let k = (k as u64).clamp(1, super::MAX_K as u64).min(c);
            let i = cells.len() as u64;
            if i > k {
                return Some(0.0);
            }
            Some(choose(c - i, k - i) as f64 / choose(c, k) as f64)
        })
        .product()
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use super::*;
    use crate::cells::{Cell, Layer};

    fn layer(name: &str, cells: usize, octet: u8) -> Layer {
        let cells = (0..cells)
            .map(|i| Cell {
                name: format!("c{i}"),
                v4: Some(Ipv4Addr::new(10, octet, i as u8, 1)),
                v6: None,
            })
            .collect();
        Layer::new(name, cells).unwrap()
    }

    /// A global layer of `global` cells and three regions of `regional` cells each.
    fn topology(global: usize, regional: usize, k: usize) -> CellTopology {
        let regions = (0..3)
            .map(|r| Some(layer(&format!("region r{r}"), regional, 10 + r as u8)))
            .collect();
        CellTopology::new(Some(layer("global", global, 1)), regions, vec![], k).unwrap()
    }

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("tenant-{i:05}.example")).collect()
    }

    fn shard_cells(t: &CellTopology, at: LayerRef, tenant: &str) -> Vec<ImpairedCell> {
        t.layer(at)
            .unwrap()
            .shard(tenant, t.k())
            .cells()
            .iter()
            .map(|&cell| ImpairedCell { layer: at, cell })
            .collect()
    }

    fn run(t: &CellTopology, impaired: &[ImpairedCell], tenants: &[String]) -> Blame {
        blame(
            t,
            impaired,
            tenants.iter().map(|n| (n.as_str(), None, None)),
            10,
        )
    }

    #[test]
    fn names_the_tenant_whose_shards_hold_every_impaired_cell() {
        // 64 global cells, k = 4: C(64,4) = 635,376 shards, so at 10,000 tenants chance puts
        // about 0.016 other tenants on the same four cells.
        let t = topology(64, 8, 4);
        let tenants = names(10_000);
        let culprit = &tenants[4242];
        let impaired = shard_cells(&t, LayerRef::Global, culprit);
        let b = run(&t, &impaired, &tenants);
        assert_eq!(b.verdict, Verdict::Named, "{b:?}");
        assert_eq!(b.impaired, 4);
        assert_eq!(b.best_cover, 4);
        assert_eq!(b.tied, 1, "{b:?}");
        assert_eq!(b.suspects[0].tenant, *culprit);
        assert!(b.by_chance < 0.1, "{}", b.by_chance);
    }

    #[test]
    fn a_small_layer_is_ambiguous_and_says_how_crowded() {
        // 16 cells, k = 2: 120 shards, ~83 of 10,000 tenants on any given pair.
        let t = topology(16, 8, 2);
        let tenants = names(10_000);
        let culprit = &tenants[7];
        let impaired = shard_cells(&t, LayerRef::Global, culprit);
        let b = run(&t, &impaired, &tenants);
        assert_eq!(b.verdict, Verdict::Ambiguous, "{b:?}");
        assert!(b.tied > 40 && b.tied < 140, "{}", b.tied);
        assert!(
            (b.by_chance - 10_000.0 / 120.0).abs() < 1e-6,
            "{}",
            b.by_chance
        );
        assert!(b.suspects.len() <= 10);
        // The culprit ties with the others; adding its region's cells tells them apart.
        let mut more = impaired.clone();
        more.extend(shard_cells(&t, LayerRef::Region(1), culprit));
        let b = run(&t, &more, &tenants);
        assert_eq!(b.best_cover, 4);
        assert!(b.tied < 10, "{b:?}");
        assert!(b.suspects.iter().any(|s| s.tenant == *culprit));
    }

    #[test]
    fn independent_failures_have_no_common_factor() {
        let t = topology(64, 8, 2);
        let tenants = names(300);
        // Two global cells no tenant of these 300 holds together (C(64,2) = 2016 pairs).
        let shards: Vec<_> = tenants
            .iter()
            .map(|n| t.layer(LayerRef::Global).unwrap().shard(n, 2))
            .collect();
        let pair = (0..64u16)
            .flat_map(|a| (a + 1..64).map(move |b| (a, b)))
            .find(|(a, b)| {
                !shards
                    .iter()
                    .any(|s| s.cells().contains(a) && s.cells().contains(b))
            })
            .unwrap();
        let impaired = [
            ImpairedCell {
                layer: LayerRef::Global,
                cell: pair.0,
            },
            ImpairedCell {
                layer: LayerRef::Global,
                cell: pair.1,
            },
        ];
        let b = run(&t, &impaired, &tenants);
        assert_eq!(b.verdict, Verdict::NoCommonFactor, "{b:?}");
        assert!(b.suspects.is_empty());
    }

    #[test]
    fn one_cell_is_too_few_and_unknown_cells_are_ignored() {
        let t = topology(16, 8, 2);
        let tenants = names(100);
        let one = [ImpairedCell {
            layer: LayerRef::Global,
            cell: 3,
        }];
        assert_eq!(run(&t, &one, &tenants).verdict, Verdict::TooFewCells);
        let bogus = [
            ImpairedCell {
                layer: LayerRef::Site(9),
                cell: 0,
            },
            ImpairedCell {
                layer: LayerRef::Global,
                cell: 999,
            },
            ImpairedCell {
                layer: LayerRef::Global,
                cell: 3,
            },
            ImpairedCell {
                layer: LayerRef::Global,
                cell: 3,
            },
        ];
        let b = run(&t, &bogus, &tenants);
        assert_eq!(b.impaired, 1);
        assert_eq!(b.verdict, Verdict::TooFewCells);
        assert_eq!(run(&t, &[], &[]).tenants, 0);
    }

    #[test]
    fn load_ranks_suspects_that_cover_equally() {
        let t = topology(16, 8, 2);
        let tenants = names(10_000);
        let impaired = shard_cells(&t, LayerRef::Global, &tenants[7]);
        let b = blame(
            &t,
            &impaired,
            tenants.iter().enumerate().map(|(i, n)| {
                let load = if i == 7 { 0.9 } else { 0.001 };
                (n.as_str(), None, Some(load))
            }),
            3,
        );
        assert_eq!(b.suspects.len(), 3);
        assert_eq!(b.suspects[0].tenant, tenants[7]);
        assert!(b.tied > 3);
    }
}
