//! `[topology.cells]` checked and compiled into a [`CellTopology`] positioned like the
//! compiled regions and sites (the cells themselves, and a tenant's shard, are `crate::cells`').

use std::sync::Arc;

use crate::cells::blame::ImpairedCell;
use crate::cells::{Cell, CellTopology, ImpairedCells, Layer, LayerRef, MAX_K};

use super::compile::{parse_addresses, Errors};
use super::config::{CellConfig, CellsConfig, DEFAULT_CELLS_K};
use super::knobs::CellKnobs;
use super::model::{RegionInfo, SiteInfo};

/// Compiles the cells; `None` (with errors pushed) when anything is wrong.
pub(super) fn compile_cells(
    config: &CellsConfig,
    global_families: (bool, bool),
    regions: &[RegionInfo],
    sites: &[SiteInfo],
    errors: &mut Errors,
) -> Option<Arc<CellTopology>> {
    let before = errors.0.len();
    let k = config.k.unwrap_or(DEFAULT_CELLS_K);
    if k == 0 || k as usize > MAX_K {
        errors.push(
            "topology.cells.k",
            format!("{k}: 1 to {MAX_K} cells per layer"),
        );
    }
    if config.global.is_empty() {
        errors.push(
            "topology.cells.global",
            "no global cells: the global layer is the normal answer",
        );
    }
    let global = layer(
        "global",
        &config.global,
        "topology.cells.global",
        global_families,
        errors,
    );
    let region_names: Vec<&str> = regions.iter().map(|r| r.name.as_str()).collect();
    let site_names: Vec<&str> = sites.iter().map(|s| s.name.as_str()).collect();
    let region_layers = named_layers(
        Place::Region,
        &config.regions,
        &region_names,
        global_families,
        errors,
    );
    let site_layers = named_layers(
        Place::Site,
        &config.fallback,
        &site_names,
        global_families,
        errors,
    );
    let quarantine = (!config.quarantine.is_empty())
        .then(|| {
            layer(
                "quarantine",
                &config.quarantine,
                "topology.cells.quarantine",
                global_families,
                errors,
            )
        })
        .flatten();
    if errors.0.len() > before {
        return None;
    }
    let topology =
        CellTopology::new(global, region_layers, site_layers, k as usize).and_then(|t| {
            match quarantine {
                Some(q) => t.with_quarantine(q),
                None => Ok(t),
            }
        });
    match topology {
        Ok(topology) => Some(Arc::new(topology)),
        Err(e) => {
            errors.push("topology.cells", e.to_string());
            None
        }
    }
}

/// Where a layer of named cells is: a region's or a fallback site's.
#[derive(Clone, Copy)]
enum Place {
    Region,
    Site,
}

/// The layers of `configs` (by region or site name), positioned like `names`; a name that is
/// no region (site) is an error naming its field.
fn named_layers(
    place: Place,
    configs: &std::collections::BTreeMap<String, Vec<CellConfig>>,
    names: &[&str],
    families: (bool, bool),
    errors: &mut Errors,
) -> Vec<Option<Layer>> {
    let (section, layer_kind, unknown) = match place {
        Place::Region => ("regions", "region", "a region of topology.regions"),
        Place::Site => (
            "fallback",
            "fallback",
            "a fallback site of topology.fallback",
        ),
    };
    let mut layers = vec![None; names.len()];
    for (name, cells) in configs {
        let path = format!("topology.cells.{section}.{name}");
        let Some(at) = names.iter().position(|n| n == name) else {
            errors.push(path, format!("{name:?} is not {unknown}"));
            continue;
        };
        let layer_name = format!("{layer_kind} {name}");
        layers[at] = layer(&layer_name, cells, &path, families, errors);
    }
    layers
}

fn layer(
    name: &str,
    configs: &[CellConfig],
    path: &str,
    (want_v4, want_v6): (bool, bool),
    errors: &mut Errors,
) -> Option<Layer> {
    let before = errors.0.len();
    let mut cells = Vec::with_capacity(configs.len());
    for (i, config) in configs.iter().enumerate() {
        let path = format!("{path}[{i}]");
        super::compile::check_identifier(&config.name, &format!("{path}.name"), errors);
        let anycast = format!("{path}.anycast");
        let (v4, v6) = parse_addresses(&config.anycast, &anycast, errors);
        if v4.len() > 1 || v6.len() > 1 {
            errors.push(
                &anycast,
                "a cell is one announced address per family: at most one IPv4 and one IPv6",
            );
        }
        if want_v4 && v4.is_empty() {
            errors.push(
                &anycast,
                "has no IPv4 address but topology.global has one (A answers would be empty)",
            );
        }
        if want_v6 && v6.is_empty() {
            errors.push(
                &anycast,
                "has no IPv6 address but topology.global has one (AAAA answers would be empty)",
            );
        }
        if !want_v4 && !v4.is_empty() || !want_v6 && !v6.is_empty() {
            errors.push(
                &anycast,
                "has an address family that topology.global has not (every answer of a name has the same families)",
            );
        }
        cells.push(Cell {
            name: config.name.clone(),
            v4: v4.first().copied(),
            v6: v6.first().copied(),
        });
    }
    if errors.0.len() > before {
        return None;
    }
    match Layer::new(name, cells) {
        Ok(layer) => Some(layer),
        Err(e) => {
            errors.push(path, e.to_string());
            None
        }
    }
}

/// The control file's `[cells.LAYER.CELL] drain = true`, checked against the compiled cells:
/// LAYER is `global`, a region's or a fallback site's name with cells, CELL one of its cells.
/// Every unknown layer or cell is an error naming its field (a drain that drains nothing must
/// not look accepted).
pub(super) fn compile_cell_knobs(
    knobs: &std::collections::BTreeMap<String, std::collections::BTreeMap<String, CellKnobs>>,
    topology: Option<&CellTopology>,
    regions: &[RegionInfo],
    sites: &[SiteInfo],
    errors: &mut Errors,
) -> Option<Arc<ImpairedCells>> {
    if knobs.is_empty() {
        return None;
    }
    let Some(topology) = topology else {
        errors.push(
            "control.cells",
            "no [topology.cells] in the config: no cell to drain",
        );
        return None;
    };
    let mut drained = Vec::new();
    for (layer_name, cells) in knobs {
        let path = format!("control.cells.{layer_name}");
        let at = if layer_name == "global" {
            Some(LayerRef::Global)
        } else if let Some(r) = regions.iter().position(|r| &r.name == layer_name) {
            Some(LayerRef::Region(r as u16))
        } else {
            sites
                .iter()
                .position(|s| &s.name == layer_name)
                .map(|s| LayerRef::Site(s as u16))
        };
        let Some(layer) = at.and_then(|at| Some((at, topology.layer(at)?))) else {
            errors.push(
                &path,
                format!("{layer_name:?} is not a layer with cells (global, or a region or fallback site of topology.cells)"),
            );
            continue;
        };
        for (cell_name, knob) in cells {
            let Some(index) = layer.1.cells().iter().position(|c| &c.name == cell_name) else {
                errors.push(
                    format!("{path}.{cell_name}"),
                    format!("{cell_name:?} is not a cell of layer {}", layer.1.name()),
                );
                continue;
            };
            if knob.drain {
                drained.push(ImpairedCell {
                    layer: layer.0,
                    cell: index as u16,
                });
            }
        }
    }
    let impaired = ImpairedCells::new(topology, &drained);
    (!impaired.is_empty()).then(|| Arc::new(impaired))
}
