//! Refused configurations and control files: every error names its field.

use super::*;

fn with(extra: &str) -> String {
    format!("{TOPOLOGY}\n{extra}")
}

#[test]
fn weight_out_of_range_names_the_field() {
    let errors = compile_err(
        &with(
            r#"
[profiles.critical]
type = "weighted"
ttl = 60
[[profiles.critical.endpoints]]
name = "frontdoor"
cname = "critical.edge.example.net."
weight = 100
[[profiles.critical.endpoints]]
name = "alt"
cname = "critical.cdn.example.org."
weight = 1001
"#,
        ),
        &ControlKnobs::default(),
    );
    assert_error(
        &errors,
        "profiles.critical.endpoints[1].weight",
        "1001 is above 1000",
    );
}

#[test]
fn endpoint_needs_exactly_one_target() {
    let errors = compile_err(
        &with(
            r#"
[profiles.p]
type = "failover"
ttl = 60
[[profiles.p.endpoints]]
name = "none"
[[profiles.p.endpoints]]
name = "both"
cname = "a.example.net."
addresses = ["192.0.2.9"]
"#,
        ),
        &ControlKnobs::default(),
    );
    assert_error(&errors, "profiles.p.endpoints[0]", "needs one of");
    assert_error(&errors, "profiles.p.endpoints[1]", "only one of");
}

#[test]
fn all_zero_weights_and_missing_weight_are_refused() {
    let errors = compile_err(
        &with(
            r#"
[profiles.z]
type = "weighted"
ttl = 60
[[profiles.z.endpoints]]
name = "a"
cname = "a.example.net."
weight = 0
[[profiles.z.endpoints]]
name = "b"
cname = "b.example.net."
"#,
        ),
        &ControlKnobs::default(),
    );
    assert_error(&errors, "profiles.z", "no servable endpoint");
    assert_error(&errors, "profiles.z.endpoints[1].weight", "required");
}

#[test]
fn bad_names_and_addresses_are_refused() {
    let errors = compile_err(
        &with(
            r#"
[profiles.p]
type = "failover"
ttl = 60
[[profiles.p.endpoints]]
name = "rel"
cname = "relative.example.net"
[[profiles.p.endpoints]]
name = "wild"
cname = "*.example.net."
[[profiles.p.endpoints]]
name = "addr"
addresses = ["192.0.2.300"]
[[profiles.p.endpoints]]
name = "bad name!"
addresses = ["192.0.2.3"]
[[steered]]
name = "a.*.example.com."
profile = "p"
"#,
        ),
        &ControlKnobs::default(),
    );
    assert_error(
        &errors,
        "profiles.p.endpoints[0].cname",
        "ending with a dot",
    );
    assert_error(&errors, "profiles.p.endpoints[1].cname", "'*'");
    assert_error(
        &errors,
        "profiles.p.endpoints[2].addresses[0]",
        "not an IPv4 or IPv6",
    );
    assert_error(&errors, "profiles.p.endpoints[3].name", "not a valid name");
    assert_error(&errors, "steered[0].name", "'*'");
}

#[test]
fn unknown_references_and_duplicates_are_refused() {
    let errors = compile_err(
        &with(
            r#"
[profiles.p]
type = "weighted"
ttl = 60
[[profiles.p.endpoints]]
name = "a"
profile = "nope"
weight = 10
[[profiles.p.endpoints]]
name = "a"
cname = "a.example.net."
weight = 10
[profiles.g]
type = "geo"
ttl = 60
[[profiles.g.endpoints]]
name = "eu"
addresses = ["192.0.2.10"]
regions = ["eu-west", "mars-1"]
default = true
[[steered]]
name = "x.example.com."
profile = "missing"
[[steered]]
name = "X.example.com."
policy = "anycast"
ttl = 30
"#,
        ),
        &ControlKnobs::default(),
    );
    assert_error(
        &errors,
        "profiles.p.endpoints[0].profile",
        "unknown profile \"nope\"",
    );
    assert_error(
        &errors,
        "profiles.p.endpoints[1].name",
        "already an endpoint",
    );
    assert_error(
        &errors,
        "profiles.g.endpoints[0].regions[1]",
        "unknown region \"mars-1\"",
    );
    assert_error(&errors, "steered[0].profile", "unknown profile \"missing\"");
    // Names compare case-insensitively.
    assert_error(&errors, "steered[1].name", "already steered by steered[0]");
}

#[test]
fn cycles_and_deep_nesting_are_refused() {
    let cycle = compile_err(
        &with(
            r#"
[profiles.a]
type = "failover"
ttl = 60
[[profiles.a.endpoints]]
name = "x"
addresses = ["192.0.2.1"]
[[profiles.a.endpoints]]
name = "to-b"
profile = "b"
[profiles.b]
type = "failover"
ttl = 60
[[profiles.b.endpoints]]
name = "to-a"
profile = "a"
"#,
        ),
        &ControlKnobs::default(),
    );
    assert_error(&cycle, "profiles.a", "cycle: a -> b -> a");

    // p1 -> p2 -> p3 -> p4 is allowed (4 profiles); p0 -> p1 -> … -> p4 is 5 deep.
    let mut chain = String::new();
    for i in 0..5 {
        let target = if i == 4 {
            "addresses = [\"192.0.2.7\"]".to_owned()
        } else {
            format!("profile = \"p{}\"", i + 1)
        };
        chain.push_str(&format!(
            "[profiles.p{i}]\ntype = \"failover\"\nttl = 60\n[[profiles.p{i}.endpoints]]\nname = \"e\"\n{target}\n"
        ));
    }
    let deep = compile_err(&with(&chain), &ControlKnobs::default());
    assert_error(&deep, "profiles.p0", "nests 5 profiles deep");
    assert!(
        !deep.iter().any(|e| e.path == "profiles.p1"),
        "a 4-deep chain is allowed: {deep:#?}"
    );
}

#[test]
fn topology_problems_are_refused() {
    let errors = compile_err(
        r#"
[topology]
global = ["192.0.2.1", "2001:db8::1"]
[[topology.regions]]
name = "eu-west"
continent = "EU"
anycast = ["198.51.100.4"]
neighbours = ["eu-south", "eu-west"]
[[topology.regions]]
name = "eu-west"
continent = "Europe"
anycast = ["2001:db8:1::5"]
[[topology.fallback]]
name = "eu-west"
continent = "EU"
anycast = ["203.0.113.2", "2001:db8:fb::2"]
"#,
        &ControlKnobs::default(),
    );
    assert_error(&errors, "topology.regions[0].anycast", "no IPv6 address");
    assert_error(&errors, "topology.regions[1].anycast", "no IPv4 address");
    assert_error(
        &errors,
        "topology.regions[0].neighbours[0]",
        "unknown region \"eu-south\"",
    );
    assert_error(
        &errors,
        "topology.regions[0].neighbours[1]",
        "own neighbour",
    );
    assert_error(
        &errors,
        "topology.regions[1].name",
        "already the name of topology.regions[0]",
    );
    assert_error(
        &errors,
        "topology.regions[1].continent",
        "not a continent code",
    );
    assert_error(
        &errors,
        "topology.fallback[0].name",
        "already the name of topology.regions[0]",
    );

    let empty = compile_err(
        "[topology]\nglobal = [\"192.0.2.1\"]\n",
        &ControlKnobs::default(),
    );
    assert_error(&empty, "topology.regions", "at least one");
}

#[test]
fn geo_region_without_endpoint_is_refused() {
    // Only eu-west is served; na-east/na-west have no neighbour or continent path to it.
    let errors = compile_err(
        &with(
            r#"
[profiles.g]
type = "geo"
ttl = 60
[[profiles.g.endpoints]]
name = "eu"
addresses = ["192.0.2.10"]
regions = ["eu-west"]
"#,
        ),
        &ControlKnobs::default(),
    );
    assert_error(&errors, "profiles.g", "region \"na-east\" has no endpoint");
    assert_error(&errors, "profiles.g", "region \"na-west\" has no endpoint");
    assert!(
        !errors.iter().any(|e| e.problem.contains("\"af-south\"")),
        "af-south reaches eu-west as a neighbour: {errors:#?}"
    );
}

fn knobs(text: &str) -> ControlKnobs {
    match toml::from_str(text) {
        Ok(k) => k,
        Err(e) => panic!("test knobs do not parse: {e}"),
    }
}

const WARM: &str = r#"
[profiles.warm]
type = "weighted"
ttl = 60
[[profiles.warm.endpoints]]
name = "frontdoor"
cname = "warm.edge.example.net."
weight = 90
[[profiles.warm.endpoints]]
name = "alt-cdn"
cname = "warm.cdn.example.org."
weight = 10
"#;

#[test]
fn control_knob_errors_name_the_knob() {
    let errors = compile_err(
        &with(WARM),
        &knobs(
            r#"
[profiles.warm.endpoints.frontdoor]
weight = 1500
[profiles.warm.endpoints.nope]
enabled = false
[profiles.cold.endpoints.x]
weight = 1
[regions.eu-west]
force = "fallback:fb-mars"
[regions.atlantis]
drain = true
"#,
        ),
    );
    assert_error(
        &errors,
        "control.profiles.warm.endpoints.frontdoor.weight",
        "1500 is above 1000",
    );
    assert_error(
        &errors,
        "control.profiles.warm.endpoints.nope",
        "no endpoint \"nope\"",
    );
    assert_error(&errors, "control.profiles.cold", "unknown profile");
    assert_error(
        &errors,
        "control.regions.eu-west.force",
        "unknown fallback site \"fb-mars\"",
    );
    assert_error(&errors, "control.regions.atlantis", "unknown region");
}

#[test]
fn control_file_that_leaves_no_servable_endpoint_is_refused() {
    let errors = compile_err(
        &with(WARM),
        &knobs(
            r#"
[profiles.warm.endpoints.frontdoor]
weight = 0
[profiles.warm.endpoints.alt-cdn]
enabled = false
"#,
        ),
    );
    assert_error(&errors, "profiles.warm", "after the control file");
}

#[test]
fn drain_with_nowhere_to_go_is_refused() {
    let text = r#"
[topology]
global = ["192.0.2.1"]
[[topology.regions]]
name = "a"
continent = "EU"
anycast = ["198.51.100.1"]
neighbours = ["b"]
[[topology.regions]]
name = "b"
continent = "EU"
anycast = ["198.51.100.2"]
neighbours = ["a"]
"#;
    let errors = compile_err(
        text,
        &knobs("[regions.a]\ndrain = true\n[regions.b]\ndrain = true\n"),
    );
    assert_error(&errors, "control.regions.a.drain", "nowhere to go");
    assert_error(&errors, "control.regions.b.drain", "nowhere to go");
    // One drained region can go to its neighbour.
    assert!(try_compile(text, &knobs("[regions.a]\ndrain = true\n")).is_ok());
    let both = compile_err(
        text,
        &knobs("[regions.a]\ndrain = true\nforce = \"global\"\n"),
    );
    assert_error(&both, "control.regions.a", "both drained and forced");
}

#[test]
fn forced_answer_parses_only_known_forms() {
    assert_eq!("global".parse::<ForcedAnswer>(), Ok(ForcedAnswer::Global));
    assert_eq!(
        "regional".parse::<ForcedAnswer>(),
        Ok(ForcedAnswer::Regional)
    );
    assert_eq!(
        "fallback:fb-eu".parse::<ForcedAnswer>(),
        Ok(ForcedAnswer::Fallback("fb-eu".to_owned()))
    );
    assert!("fallback:".parse::<ForcedAnswer>().is_err());
    assert!("Global".parse::<ForcedAnswer>().is_err());
    assert!(toml::from_str::<ControlKnobs>("[regions.a]\nforce = \"elsewhere\"\n").is_err());
}

#[test]
fn unknown_config_fields_are_refused_by_serde() {
    let text = with("[profiles.p]\ntype = \"failover\"\nttl = 60\nweights = 3\nendpoints = []\n");
    assert!(toml::from_str::<Fragment>(&text).is_err());
}
