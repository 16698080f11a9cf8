//! The static projection of steered names (issue 33 item 3): which always-serve answer a
//! zone transfer carries, with the knobs applied, and the tie-break.

use super::*;

const PROFILES: &str = r#"
[profiles.w]
type = "weighted"
ttl = 120
[[profiles.w.endpoints]]
name = "first"
cname = "first.example.net."
weight = 50
[[profiles.w.endpoints]]
name = "second"
addresses = ["192.0.2.20", "2001:db8::20"]
weight = 50
[[profiles.w.endpoints]]
name = "watched"
addresses = ["192.0.2.30"]
weight = 900
monitor = { tcp = "127.0.0.1:1" }
[[profiles.w.endpoints]]
name = "nested"
profile = "geo"
weight = 10

[profiles.geo]
type = "geo"
ttl = 30
[[profiles.geo.endpoints]]
name = "eu"
addresses = ["198.51.100.40"]
regions = ["eu-west", "eu-north"]
[[profiles.geo.endpoints]]
name = "na"
addresses = ["198.51.100.50"]
regions = ["na-east", "na-west"]
default = true

[[steered]]
name = "*.edge.example.net."
policy = "anycast"
ttl = 300
[[steered]]
name = "w.example.com."
profile = "w"
ttl = 60
[[steered]]
name = "geo.example.com."
profile = "geo"
transfer = "omit"
"#;

fn policies(knobs: &ControlKnobs) -> CompiledPolicies {
    compile_ok(&format!("{TOPOLOGY}{PROFILES}"), knobs)
}

fn weights(pairs: &[(&str, u32)]) -> ControlKnobs {
    let mut k = ControlKnobs::default();
    for (endpoint, weight) in pairs {
        k.profiles
            .entry("w".to_owned())
            .or_default()
            .endpoints
            .insert(
                (*endpoint).to_owned(),
                EndpointKnobs {
                    weight: Some(*weight),
                    ..EndpointKnobs::default()
                },
            );
    }
    k
}

fn projected(p: &CompiledPolicies, steered: usize) -> Option<(String, u32)> {
    let answer = p.static_answer(p.steered()[steered].root)?;
    let text = match answer.target {
        Target::Cname { name, .. } => format!("CNAME {name}"),
        Target::Addresses { v4, v6 } => format!("A {v4:?} AAAA {v6:?}"),
    };
    Some((text, answer.ttl))
}

#[test]
fn anycast_names_project_the_global_anycast_with_their_ttl() {
    let p = policies(&ControlKnobs::default());
    assert_eq!(
        projected(&p, 0),
        Some(("A [192.0.2.1] AAAA [2001:db8::1]".to_owned(), 300))
    );
    assert!(p.steered()[0].is_wildcard);
    assert_eq!(p.steered()[0].transfer, TransferProjection::Default);
    assert_eq!(p.steered()[2].transfer, TransferProjection::Omit);
}

#[test]
fn a_profile_projects_its_heaviest_always_serve_endpoint_ties_to_the_first_written() {
    // first and second tie at 50; the monitored endpoint (900) is never projected.
    let p = policies(&ControlKnobs::default());
    assert_eq!(
        projected(&p, 1),
        Some(("CNAME first.example.net.".to_owned(), 60))
    );
    // The knobs move it: second heavier.
    let p = policies(&weights(&[("second", 70)]));
    assert_eq!(
        projected(&p, 1),
        Some(("A [192.0.2.20] AAAA [2001:db8::20]".to_owned(), 60))
    );
    // Only the nested geo profile left: its first always-serve endpoint, the name's TTL cap
    // over the profile's.
    let p = policies(&weights(&[("first", 0), ("second", 0)]));
    assert_eq!(
        projected(&p, 1),
        Some(("A [198.51.100.40] AAAA []".to_owned(), 60))
    );
    // Nothing always served: no projection.
    let p = policies(&weights(&[("first", 0), ("second", 0), ("nested", 0)]));
    assert_eq!(projected(&p, 1), None);
}

#[test]
fn a_geo_profile_projects_the_endpoint_written_first_with_the_profile_ttl() {
    let p = policies(&ControlKnobs::default());
    assert_eq!(
        projected(&p, 2),
        Some(("A [198.51.100.40] AAAA []".to_owned(), 30))
    );
}
