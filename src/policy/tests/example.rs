//! The bundled example (steerdns.toml) parses, compiles and answers as documented.

use super::*;

const EXAMPLE: &str = include_str!("../../../steerdns.toml");

pub(super) fn compile_example(knobs: &ControlKnobs) -> CompiledPolicies {
    let config = match crate::config::Config::parse(EXAMPLE, std::path::Path::new("steerdns.toml"))
    {
        Ok(c) => c,
        Err(e) => panic!("bundled steerdns.toml does not parse: {e}"),
    };
    match compile(&config.topology, &config.profiles, &config.steered, knobs) {
        Ok(p) => p,
        Err(errors) => panic!("unexpected compile errors: {errors:#?}"),
    }
}

#[test]
fn example_compiles_and_answers_as_documented() {
    let p = compile_example(&ControlKnobs::default());
    let names: Vec<&str> = p.region_names().collect();
    assert_eq!(
        names,
        [
            "na-east", "na-west", "sa-east", "eu-west", "eu-north", "af-south", "ap-east",
            "ap-south"
        ]
    );
    let sites: Vec<&str> = p.fallback_sites().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(sites, ["fb-na", "fb-eu", "fb-ap"]);

    let steered: Vec<(String, bool)> = p
        .steered()
        .iter()
        .map(|s| (s.name.to_ascii(), s.is_wildcard))
        .collect();
    assert_eq!(
        steered,
        [
            ("*.edge.example.net.".to_owned(), true),
            ("critical.example.com.".to_owned(), false),
            ("warm.example.com.".to_owned(), false),
            ("gw.example.com.".to_owned(), false),
        ]
    );

    let shed = ShedView::default();
    let region = |name: &str| p.region_index(name).unwrap_or(u16::MAX);
    let c = client(region("eu-west"), v4_subnet(1), 20);

    let anycast = evaluate(&p, p.steered()[0].root, &c, &shed);
    assert_eq!(v4_of(&anycast), [v4("192.0.2.1")]);
    assert_eq!((anycast.ttl, anycast.scope), (300, 0));

    let critical = evaluate(&p, p.steered()[1].root, &c, &shed);
    assert_eq!(
        cname_of(&critical).as_deref(),
        Some("critical.edge.example.net.")
    );
    assert_eq!((critical.ttl, critical.scope), (60, 0));

    // The app gateways by region; af-south goes via its first neighbour, eu-west.
    let gw = p.steered()[3].root;
    for (region_name, expected) in [
        ("eu-west", "203.0.113.10"),
        ("eu-north", "203.0.113.10"),
        ("na-east", "203.0.113.20"),
        ("na-west", "203.0.113.20"),
        ("sa-east", "203.0.113.20"),
        ("ap-east", "203.0.113.30"),
        ("ap-south", "203.0.113.30"),
        ("af-south", "203.0.113.10"),
    ] {
        let d = evaluate(
            &p,
            gw,
            &client(region(region_name), v4_subnet(2), 18),
            &shed,
        );
        assert_eq!(v4_of(&d), [v4(expected)], "{region_name}");
        assert_eq!(d.scope, 18, "geo answers are scoped to the locating prefix");
    }
}

#[test]
fn example_break_glass_flip_goes_to_the_app_gateways() {
    let knobs: ControlKnobs = match toml::from_str(
        "[profiles.critical.endpoints.frontdoor]\nweight = 0\n[profiles.critical.endpoints.appgw]\nweight = 100\n",
    ) {
        Ok(k) => k,
        Err(e) => panic!("{e}"),
    };
    let p = compile_example(&knobs);
    let root = p.steered()[1].root;
    let ap = p.region_index("ap-east").unwrap_or(u16::MAX);
    let d = evaluate(
        &p,
        root,
        &client(ap, v4_subnet(3), 22),
        &ShedView::default(),
    );
    assert_eq!(v4_of(&d), [v4("203.0.113.30")]);
    assert_eq!(d.scope, 22);
    let text = explain(
        &p,
        root,
        &client(ap, v4_subnet(3), 22),
        &ShedView::default(),
    );
    assert!(
        text.contains("profile critical[weighted] -> endpoint appgw"),
        "{text}"
    );
    assert!(
        text.contains("profile appgw[geo] -> endpoint ap (serves ap-east)"),
        "{text}"
    );
}
