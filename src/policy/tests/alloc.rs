//! `evaluate` must not allocate: counted with a per-thread counting allocator (test builds only).

use super::*;
use crate::test_alloc::allocations;

#[test]
fn evaluate_does_not_allocate() {
    let mut knobs = ControlKnobs::default();
    knobs
        .profiles
        .entry("critical".to_owned())
        .or_default()
        .endpoints
        .insert(
            "appgw".to_owned(),
            EndpointKnobs {
                weight: Some(50),
                enabled: None,
                force_up: None,
            },
        );
    knobs.regions.insert(
        "eu-north".to_owned(),
        RegionKnobs {
            force: None,
            drain: true,
        },
    );
    let p = super::example::compile_example(&knobs);
    let mut shed = ShedView::default();
    let dest = [ShedShare {
        destination: Destination::Fallback(1),
        share_permille: 1000,
    }];
    match RegionShed::new(400, &dest, Some(30)) {
        Ok(state) => shed.set_region(3, state),
        Err(e) => panic!("{e}"),
    }
    let roots: Vec<PolicyRoot> = p.steered().iter().map(|s| s.root).collect();
    let before = allocations();
    let mut answered = 0usize;
    for i in 0..2_000 {
        let region = (i % 9) as u16; // includes one out-of-range region
        let addr = if i % 2 == 0 {
            v4_subnet(i)
        } else {
            v6_subnet(i)
        };
        for root in &roots {
            let d = evaluate(&p, *root, &client(region, addr, 20), &shed);
            answered += usize::from(d.ttl > 0);
        }
    }
    assert_eq!(allocations() - before, 0, "evaluate allocated");
    // The counter does see allocations (so the assertion above can fail).
    let text = explain(&p, roots[0], &client(3, v4_subnet(1), 20), &shed);
    assert!(allocations() > before && !text.is_empty());
    assert_eq!(answered, 2_000 * roots.len());
}
