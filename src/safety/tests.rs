use std::path::Path;
use std::time::{Duration, SystemTime};

use super::*;
use crate::config::Config;

const RULES: &str = r#"
[[safety.rules]]
id = "critical-serves"
text = "critical always has an endpoint with weight > 0"
kind = "min-serving"
profile = "critical"
min = 1

[[safety.rules]]
id = "max-two-drained"
text = "no more than two regions drained at once"
kind = "max-drained"
max = 2

[[safety.rules]]
id = "fallback-limit"
text = "the fallback ring is forced for at most one region"
kind = "max-fallback"
max = 1

[[safety.rules]]
id = "warm-gated"
text = "warm's weights change only while break-glass is armed"
kind = "gate"
knobs = ["profiles.warm"]
gate = "break-glass"

[[safety.rules]]
id = "shield-calm"
text = "the shield mode changes at most once a minute"
kind = "gate"
knobs = ["shield"]
gate = "always"
gate_value = "open"
wait_secs = 60
"#;

fn example_with_rules() -> Config {
    let text = include_str!("../../steerdns.toml");
    let start = text.find("[[safety.rules]]").unwrap_or(text.len());
    let text = format!("{}{RULES}", &text[..start]);
    Config::parse(&text, Path::new("steerdns.toml")).unwrap()
}

fn control(text: &str) -> ControlFile {
    ControlFile::parse(&format!("serial = 1\n{text}"), Path::new("c.toml")).unwrap()
}

fn check(config: &Config, before: &str, after: &str) -> Vec<Violation> {
    let baseline = Baseline::new(&config.profiles, &config.topology);
    let (before, after) = (control(before), control(after));
    let change = Change {
        before: &before,
        after: &after,
        recent: &[],
        now: SystemTime::now(),
    };
    evaluate(&config.safety, &baseline, change, &[])
}

fn ids(v: &[Violation]) -> Vec<&str> {
    v.iter().map(|v| v.rule.as_str()).collect()
}

#[test]
fn the_bundled_example_ships_the_two_assertion_rules() {
    let config = Config::load(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/steerdns.toml"
    )))
    .unwrap();
    let found: Vec<(&str, RuleKind)> = config
        .safety
        .rules
        .iter()
        .map(|r| (r.id.as_str(), r.kind))
        .collect();
    assert_eq!(
        found,
        [
            ("critical-serves", RuleKind::MinServing),
            ("max-two-drained", RuleKind::MaxDrained)
        ]
    );
}

#[test]
fn min_serving_refuses_an_all_zero_profile_but_not_a_flip() {
    let config = example_with_rules();
    let flip =
        "[profiles.critical.endpoints]\nfrontdoor = { weight = 0 }\nalt-cdn = { weight = 100 }\n";
    assert!(check(&config, "", flip).is_empty());
    let zero = "[profiles.critical.endpoints]\nfrontdoor = { weight = 0 }\n";
    let v = check(&config, "", zero);
    assert_eq!(ids(&v), ["critical-serves"]);
    assert!(v[0].why.contains("0 would serve, at least 1"), "{}", v[0]);
    let off = "[profiles.critical.endpoints]\nfrontdoor = { enabled = false }\n";
    assert_eq!(ids(&check(&config, "", off)), ["critical-serves"]);
}

#[test]
fn a_third_drain_is_refused_and_an_undrain_during_a_breach_is_not() {
    let config = example_with_rules();
    let two = "[regions.eu-west]\ndrain = true\n[regions.na-west]\ndrain = true\n";
    let three = format!("{two}[regions.ap-east]\ndrain = true\n");
    let four = format!("{three}[regions.ap-south]\ndrain = true\n");
    assert!(check(&config, "", two).is_empty());
    assert_eq!(ids(&check(&config, two, &three)), ["max-two-drained"]);
    // Already three (an override let it in): undraining one, or touching anything else, is
    // not refused; draining a fourth is.
    assert!(check(&config, &three, two).is_empty());
    let weights = format!("{three}[profiles.critical.endpoints]\nalt-cdn = {{ weight = 5 }}\n");
    assert!(check(&config, &three, &weights).is_empty());
    assert_eq!(ids(&check(&config, &three, &four)), ["max-two-drained"]);
}

#[test]
fn fallback_forcing_is_counted() {
    let config = example_with_rules();
    let one = "[regions.eu-west]\nforce = \"fallback:fb-eu\"\n";
    let two = format!("{one}[regions.eu-north]\nforce = \"fallback:fb-eu\"\n");
    assert!(check(&config, "", one).is_empty());
    assert_eq!(ids(&check(&config, one, &two)), ["fallback-limit"]);
    let regional = format!("{one}[regions.eu-north]\nforce = \"regional\"\n");
    assert!(check(&config, one, &regional).is_empty());
}

#[test]
fn a_gate_must_be_armed_in_the_version_before() {
    let config = example_with_rules();
    let change =
        "[profiles.warm.endpoints]\nalt-cdn = { weight = 50 }\nfrontdoor = { weight = 50 }\n";
    let v = check(&config, "", change);
    assert_eq!(ids(&v), ["warm-gated"]);
    assert!(
        v[0].why.contains("profiles.warm.endpoints.alt-cdn.weight"),
        "{}",
        v[0]
    );
    // Arming in the same change does not open the gate...
    let armed_too = format!("[gates]\nbreak-glass = \"armed\"\n{change}");
    assert_eq!(ids(&check(&config, "", &armed_too)), ["warm-gated"]);
    // ...arming first does.
    let armed = "[gates]\nbreak-glass = \"armed\"\n";
    assert!(check(&config, "", armed).is_empty());
    assert!(check(&config, armed, &armed_too).is_empty());
    // Other knobs are not gated.
    assert!(check(&config, "", "[regions.eu-west]\ndrain = true\n").is_empty());
}

#[test]
fn a_wait_period_counts_from_the_last_recorded_change_of_its_targets() {
    let config = example_with_rules();
    let baseline = Baseline::new(&config.profiles, &config.topology);
    let mut rules = config.safety.clone();
    rules.rules.retain(|r| r.id == "shield-calm");
    rules.rules[0].gate = Some("open".into());
    rules.rules[0].gate_value = "yes".into();
    let open = "[gates]\nopen = \"yes\"\n";
    let now = SystemTime::now();
    let at = |secs_ago: u64, text: &str| Recorded {
        at: now - Duration::from_secs(secs_ago),
        control: control(&format!("{text}{open}")),
    };
    let recent = [
        at(300, ""),
        at(30, "shield = \"frozen\"\n"),
        at(10, "shield = \"frozen\"\n[regions.eu-west]\ndrain = true\n"),
    ];
    let before = recent[2].control.clone();
    let after = control(&format!(
        "shield = \"off\"\n[regions.eu-west]\ndrain = true\n{open}"
    ));
    let change = Change {
        before: &before,
        after: &after,
        recent: &recent,
        now,
    };
    let v = evaluate(&rules, &baseline, change, &[]);
    assert_eq!(ids(&v), ["shield-calm"]);
    assert!(v[0].why.contains("changed 30 s ago"), "{}", v[0]);
    assert!(refused(&v));
    let v = evaluate(&rules, &baseline, change, &["shield-calm".into()]);
    assert!(v[0].overridden && !refused(&v));
    // Long enough ago: allowed.
    let change = Change {
        now: now + Duration::from_secs(31),
        ..change
    };
    assert!(evaluate(&rules, &baseline, change, &[]).is_empty());
}

#[test]
fn rule_errors_name_the_line_and_field() {
    let base = include_str!("../../steerdns.toml");
    let start = base.find("[[safety.rules]]").unwrap_or(base.len());
    let base = &base[..start];
    let line_of =
        |needle: &str, text: &str| text.lines().position(|l| l.contains(needle)).unwrap() + 1;
    let cases = [
        (
            "[[safety.rules]]\nid = \"a\"\ntext = \"t\"\nkind = \"max-drained\"\nmax = 2\ncolour = 1\n",
            "colour",
            "unknown field `colour`",
        ),
        (
            "[[safety.rules]]\nid = \"a\"\ntext = \"t\"\nkind = \"min-serving\"\nprofile = \"nope\"\nmin = 1\n",
            "profile = \"nope\"",
            "safety.rules[0].profile: \"nope\" is not a configured profile",
        ),
        (
            "[[safety.rules]]\nid = \"a\"\ntext = \"t\"\nkind = \"max-drained\"\nmax = 1\n[[safety.rules]]\nid = \"b\"\ntext = \"t\"\nkind = \"max-drained\"\nregions = [\"mars\"]\nmax = 1\n",
            "regions = [\"mars\"]",
            "safety.rules[1].regions: \"mars\" is not a region",
        ),
        (
            "[[safety.rules]]\nid = \"a\"\ntext = \"t\"\nkind = \"gate\"\nknobs = [\"profiles.critical\"]\n",
            // A missing field: the line of its rule.
            "[[safety.rules]]",
            "safety.rules[0].gate: is required",
        ),
    ];
    for (rules, needle, expected) in cases {
        let text = format!("{base}{rules}");
        let err = Config::parse(&text, Path::new("steerdns.toml"))
            .unwrap_err()
            .to_string();
        let line = line_of(needle, &text);
        assert!(
            err.starts_with(&format!("steerdns.toml:{line}:")),
            "{err} (expected line {line})"
        );
        assert!(err.contains(expected), "{err}");
    }
}

#[test]
fn patterns_cover_what_is_below_them() {
    assert!(covers(
        "profiles.critical",
        "profiles.critical.endpoints.a.weight"
    ));
    assert!(covers("regions.*.drain", "regions.eu-west.drain"));
    assert!(!covers("regions.*.drain", "regions.eu-west.force"));
    assert!(!covers(
        "profiles.critical",
        "profiles.criticalx.endpoints.a.weight"
    ));
    assert!(!covers(
        "profiles.critical.endpoints.a.weight.x",
        "profiles.critical.endpoints.a.weight"
    ));
}
