//! Cells impaired by their own probes and by their load (issue 31, item 2): the monitor config
//! and its errors, the cells down in the health view and hot in the shield's view left out of
//! their tenants' answers together with the drained ones, the layer fallback when a shard is
//! impaired whole across sources, and an unchanged ECS scope.

use std::sync::Arc;

use super::*;
use crate::cells::blame::ImpairedCell;
use crate::cells::{ImpairedCells, LayerRef, Why};
use crate::policy::health::SlotHealth;
use crate::test_alloc::allocations;

const CELLS: &str = r#"
[topology.cells]
k = 2
global = [
  { name = "g1", anycast = ["192.0.2.11", "2001:db8::11"], monitor = { tcp = "127.0.0.1:9" } },
  { name = "g2", anycast = ["192.0.2.12", "2001:db8::12"] },
  { name = "g3", anycast = ["192.0.2.13", "2001:db8::13"] },
  { name = "g4", anycast = ["192.0.2.14", "2001:db8::14"] },
]
[topology.cells.monitors.global]
tcp = "{cell}:443"
interval_ms = 1000
"#;

const ROOT: PolicyRoot = PolicyRoot::Anycast { ttl: 300 };

fn policies() -> CompiledPolicies {
    compile_ok(
        &format!("{TOPOLOGY}\n{CELLS}\n{STEERED}"),
        &ControlKnobs::default(),
    )
}

fn global(cell: u16) -> ImpairedCell {
    ImpairedCell {
        layer: LayerRef::Global,
        cell,
    }
}

/// The health view with the cells at `down` (positions in the global layer) down.
fn health_with_down(p: &CompiledPolicies, down: &[u16]) -> HealthView {
    let slots = (0..p.monitors().len())
        .map(|slot| {
            let cell = p
                .cell_monitors()
                .iter()
                .find(|(_, s)| usize::from(*s) == slot);
            let up = cell.is_none_or(|(c, _)| !down.contains(&c.cell));
            SlotHealth { up, last_up: 0 }
        })
        .collect();
    let topology = p.cells().unwrap_or_else(|| panic!("cells"));
    HealthView::new(slots).with_cells(topology, p.cell_monitors())
}

fn shed_with_hot(p: &CompiledPolicies, hot: &[u16]) -> ShedView {
    let topology = p.cells().unwrap_or_else(|| panic!("cells"));
    let cells: Vec<_> = hot.iter().map(|&c| global(c)).collect();
    let mut view = ShedView::default();
    view.set_cells(Some(Arc::new(ImpairedCells::because(
        topology,
        &cells,
        Why::Hot,
    ))));
    view
}

/// The tenant's answer: served addresses (less those left out) and the decision's scope.
fn served(
    p: &CompiledPolicies,
    tenant: &crate::cells::TenantCells,
    shed: &ShedView,
    health: &HealthView,
) -> (Vec<Ipv4Addr>, u8, Option<Destination>) {
    let client = client(EU_WEST, v4_subnet(7), 20);
    let as_tenant = AsTenant {
        name: "tenant",
        cells: Some(tenant),
    };
    let d = evaluate_for_tenant(p, ROOT, &client, shed, health, Some(as_tenant));
    let kept = d.left_out.keep(v4_of(&d)).copied().collect();
    (kept, d.scope, d.trace.cells_fallback)
}

/// A cell's position in the global layer, from its IPv4 address.
fn position(a: Ipv4Addr) -> u16 {
    u16::from(a.octets()[3]) - 11
}

#[test]
fn cell_monitors_compile_per_cell_and_per_layer_with_the_cells_address() {
    let p = policies();
    let targets: Vec<&str> = p.monitors().iter().map(|m| m.target.as_str()).collect();
    assert_eq!(p.cell_monitors().len(), 4, "every global cell has a probe");
    assert!(
        targets.contains(&"tcp:127.0.0.1:9"),
        "{targets:?}: g1's own"
    );
    assert!(
        targets.contains(&"tcp:192.0.2.12:443"),
        "{targets:?}: the layer's, at g2's address"
    );
    assert!(!targets.iter().any(|t| t.contains("{cell}")), "{targets:?}");
}

#[test]
fn cell_monitor_errors_name_their_field() {
    let bad = r#"
[topology.cells]
global = [
  { name = "g1", anycast = ["192.0.2.11", "2001:db8::11"], monitor = { tcp = "{cell}:443", fall = 0 } },
  { name = "g2", anycast = ["192.0.2.12", "2001:db8::12"] },
]
[topology.cells.monitors.mars]
tcp = "{cell}:443"
[topology.cells.monitors.global]
url = "http://{cell}/health"
tcp = "{cell}:80"
"#;
    let errors = compile_err(
        &format!("{TOPOLOGY}\n{bad}\n{STEERED}"),
        &ControlKnobs::default(),
    );
    assert_error(
        &errors,
        "topology.cells.global[0].monitor.fall",
        "outside 1..=100",
    );
    assert_error(
        &errors,
        "topology.cells.monitors.mars",
        "not a layer with cells",
    );
    assert_error(
        &errors,
        "topology.cells.monitors.global",
        "only one of url, tcp or dns",
    );
    let unknown = r#"
[topology.cells]
global = [{ name = "g1", anycast = ["192.0.2.11"], monitor = { tcp = "{cell}:443", every = 5 } }]
"#;
    let parsed: Result<Fragment, _> = toml::from_str(&format!("{TOPOLOGY}\n{unknown}"));
    let error = parsed.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(error.contains("unknown field `every`"), "{error}");
}

#[test]
fn a_probe_down_or_hot_cell_is_left_out_like_a_drained_one_with_the_same_scope() {
    let p = policies();
    let topology = p.cells().unwrap_or_else(|| panic!("cells"));
    let tenant = topology.assign("fabrikam", None);
    let (all_up, scope, _) = served(&p, &tenant, &ShedView::default(), &HealthView::all_up());
    assert_eq!(all_up.len(), 2);
    let (first, second) = (position(all_up[0]), position(all_up[1]));
    let other = (0..4u16)
        .map(|i| topology.assign(&format!("other{i}"), None))
        .find(|t| {
            let (v4, _) = t.layer(LayerRef::Global).unwrap_or_default();
            !v4.iter().any(|a| position(*a) == first)
        })
        .unwrap_or_else(|| panic!("a tenant without {first}"));
    let (other_before, ..) = served(&p, &other, &ShedView::default(), &HealthView::all_up());

    // Its first cell's probe down: the other cell alone, scope unchanged.
    let down = health_with_down(&p, &[first]);
    let (kept, down_scope, fallback) = served(&p, &tenant, &ShedView::default(), &down);
    assert_eq!(kept, [all_up[1]]);
    assert_eq!((down_scope, fallback), (scope, None));
    let (other_now, ..) = served(&p, &other, &ShedView::default(), &down);
    assert_eq!(
        other_now, other_before,
        "a tenant without the cell is untouched"
    );

    // Its second cell hot instead: the first alone.
    let hot = shed_with_hot(&p, &[second]);
    let (kept, ..) = served(&p, &tenant, &hot, &HealthView::all_up());
    assert_eq!(kept, [all_up[0]]);

    // One down, the other hot: the whole shard is out, the answer falls back a layer (the
    // client's region, which has no cells: its own addresses), never empty.
    let (kept, _, fallback) = served(&p, &tenant, &hot, &down);
    assert_eq!(fallback, Some(Destination::Region(EU_WEST)));
    assert!(!kept.is_empty());
    assert!(kept.iter().all(|a| !all_up.contains(a)), "{kept:?}");
}

#[test]
fn answers_with_probe_down_and_hot_cells_allocate_nothing() {
    let p = policies();
    let topology = p.cells().unwrap_or_else(|| panic!("cells"));
    let tenant = topology.assign("fabrikam", None);
    let down = health_with_down(&p, &[0, 2]);
    let hot = shed_with_hot(&p, &[1]);
    let before = allocations();
    let mut n = 0;
    for _ in 0..10 {
        n += served_len(&p, &tenant, &hot, &down);
    }
    assert_eq!(allocations(), before);
    assert!(n > 0);
}

fn served_len(
    p: &CompiledPolicies,
    tenant: &crate::cells::TenantCells,
    shed: &ShedView,
    health: &HealthView,
) -> usize {
    let client = client(EU_WEST, v4_subnet(7), 20);
    let as_tenant = AsTenant {
        name: "tenant",
        cells: Some(tenant),
    };
    let d = evaluate_for_tenant(p, ROOT, &client, shed, health, Some(as_tenant));
    d.left_out.kept(v4_of(&d).len())
}
