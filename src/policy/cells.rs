//! `[topology.cells]` checked and compiled into a [`CellTopology`] positioned like the
//! compiled regions and sites (the cells themselves, and a tenant's shard, are `crate::cells`'),
//! the cells' health probes into monitor slots, and the control file's cell drains.

use std::sync::Arc;

use crate::cells::blame::ImpairedCell;
use crate::cells::{Cell, CellTopology, ImpairedCells, Layer, LayerRef, MAX_K};

use super::compile::{parse_addresses, Errors};
use super::config::{CellConfig, CellsConfig, MonitorConfig, DEFAULT_CELLS_K};
use super::knobs::CellKnobs;
use super::model::{RegionInfo, SiteInfo};
use super::monitor::MonitorTable;

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
        let Some(layer) = layer_named(layer_name, topology, regions, sites) else {
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

/// The layer the control file (and `[topology.cells.monitors]`) names `name`: `global`, a
/// region's or a fallback site's name; `None` when it is no layer with cells.
fn layer_named<'t>(
    name: &str,
    topology: &'t CellTopology,
    regions: &[RegionInfo],
    sites: &[SiteInfo],
) -> Option<(LayerRef, &'t Layer)> {
    let at = if name == "global" {
        Some(LayerRef::Global)
    } else if let Some(r) = regions.iter().position(|r| r.name == name) {
        Some(LayerRef::Region(r as u16))
    } else {
        sites
            .iter()
            .position(|s| s.name == name)
            .map(|s| LayerRef::Site(s as u16))
    };
    at.and_then(|at| Some((at, topology.layer(at)?)))
}

/// What stands for a cell's own address in its monitor.
const CELL_PLACEHOLDER: &str = "{cell}";

/// The cells' health probes, each compiled into a monitor slot of `monitors` (shared with
/// endpoints that probe the same target the same way): a cell's own `monitor`, else its
/// layer's in `[topology.cells.monitors]`. A layer there that has no cells is an error naming
/// its field; so is every problem of a monitor, under the field it was written in.
pub(super) fn compile_cell_monitors(
    config: &CellsConfig,
    topology: &CellTopology,
    regions: &[RegionInfo],
    sites: &[SiteInfo],
    monitors: &mut MonitorTable,
    errors: &mut Errors,
) -> Vec<(ImpairedCell, u16)> {
    for name in config.monitors.keys() {
        if layer_named(name, topology, regions, sites).is_none() {
            errors.push(
                format!("topology.cells.monitors.{name}"),
                format!("{name:?} is not a layer with cells (global, or a region or fallback site of topology.cells)"),
            );
        }
    }
    let mut out = Vec::new();
    for (at, layer) in topology.layers() {
        let (layer_name, path) = layer_paths(at, regions, sites);
        let default = config.monitors.get(&layer_name);
        let written = cell_configs(config, at, regions, sites);
        for (index, cell) in layer.cells().iter().enumerate() {
            let own = written.get(index).and_then(|c| c.monitor.as_ref());
            let (monitor, field) = match (own, default) {
                (Some(m), _) => (m, format!("{path}[{index}].monitor")),
                (None, Some(m)) => (m, format!("topology.cells.monitors.{layer_name}")),
                (None, None) => continue,
            };
            let Some(monitor) = for_cell(monitor, cell, &field, errors) else {
                continue;
            };
            if let Some(slot) = monitors.add(&monitor, &field, errors) {
                let cell = ImpairedCell {
                    layer: at,
                    cell: index as u16,
                };
                out.push((cell, slot));
            }
        }
    }
    for (i, cell) in config.quarantine.iter().enumerate() {
        if cell.monitor.is_some() {
            errors.push(
                format!("topology.cells.quarantine[{i}].monitor"),
                "quarantine cells are not probed (a quarantined tenant has no other cell to be moved to)",
            );
        }
    }
    out
}

/// A layer's name as the control file writes it, and its config path.
fn layer_paths(at: LayerRef, regions: &[RegionInfo], sites: &[SiteInfo]) -> (String, String) {
    match at {
        LayerRef::Global => ("global".into(), "topology.cells.global".into()),
        LayerRef::Region(r) => {
            let name = regions
                .get(usize::from(r))
                .map_or_else(String::new, |r| r.name.clone());
            let path = format!("topology.cells.regions.{name}");
            (name, path)
        }
        LayerRef::Site(s) => {
            let name = sites
                .get(usize::from(s))
                .map_or_else(String::new, |s| s.name.clone());
            let path = format!("topology.cells.fallback.{name}");
            (name, path)
        }
    }
}

/// The cells of layer `at` as written in the config (in the compiled layer's order).
fn cell_configs<'c>(
    config: &'c CellsConfig,
    at: LayerRef,
    regions: &[RegionInfo],
    sites: &[SiteInfo],
) -> &'c [CellConfig] {
    let named = |table: &'c std::collections::BTreeMap<String, Vec<CellConfig>>,
                 name: Option<&str>| {
        name.and_then(|n| table.get(n))
            .map_or(&[][..], Vec::as_slice)
    };
    match at {
        LayerRef::Global => &config.global,
        LayerRef::Region(r) => named(
            &config.regions,
            regions.get(usize::from(r)).map(|r| r.name.as_str()),
        ),
        LayerRef::Site(s) => named(
            &config.fallback,
            sites.get(usize::from(s)).map(|s| s.name.as_str()),
        ),
    }
}

/// `monitor` with [`CELL_PLACEHOLDER`] replaced by `cell`'s address (IPv4, else `[IPv6]`).
fn for_cell(
    monitor: &MonitorConfig,
    cell: &Cell,
    field: &str,
    errors: &mut Errors,
) -> Option<MonitorConfig> {
    let address = match (cell.v4, cell.v6) {
        (Some(v4), _) => v4.to_string(),
        (None, Some(v6)) => format!("[{v6}]"),
        (None, None) => {
            errors.push(field, "the cell has no address to probe");
            return None;
        }
    };
    let fill = |text: &Option<String>| text.as_ref().map(|t| t.replace(CELL_PLACEHOLDER, &address));
    Some(MonitorConfig {
        url: fill(&monitor.url),
        tcp: fill(&monitor.tcp),
        dns: fill(&monitor.dns),
        ..monitor.clone()
    })
}
