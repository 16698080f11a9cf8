//! Monitored endpoints: config checks, one slot per target, and how a health view changes
//! failover, weighted, geo and nested answers, `all_down`, and the control file's overrides.

use super::*;

fn monitor(url: &str) -> String {
    format!(
        "monitor = {{ url = \"{url}\", interval_ms = 1000, timeout_ms = 500, fall = 2, rise = 2 }}"
    )
}

/// Failover `f`: primary (http :1), secondary (http :2), tertiary (unmonitored unless given).
fn failover(all_down: Option<&str>, tertiary_monitored: bool) -> String {
    let all_down = all_down.map_or(String::new(), |a| format!("all_down = \"{a}\"\n"));
    let tertiary = if tertiary_monitored {
        monitor("http://127.0.0.1:3/")
    } else {
        String::new()
    };
    format!(
        "{TOPOLOGY}
[profiles.f]
type = \"failover\"
ttl = 30
{all_down}
[[profiles.f.endpoints]]
name = \"primary\"
cname = \"primary.example.net.\"
{}
[[profiles.f.endpoints]]
name = \"secondary\"
cname = \"secondary.example.net.\"
{}
[[profiles.f.endpoints]]
name = \"tertiary\"
cname = \"tertiary.example.net.\"
{tertiary}
[profiles.backup]
type = \"failover\"
ttl = 30
[[profiles.backup.endpoints]]
name = \"static\"
cname = \"static.example.net.\"
",
        monitor("http://127.0.0.1:1/health"),
        monitor("http://127.0.0.1:2/health"),
    )
}

/// A view with these slots down (and `last_up` generations for down slots).
fn view(down: &[(u16, u64)], slots: usize) -> HealthView {
    let mut all = vec![
        SlotHealth {
            up: true,
            last_up: 10
        };
        slots
    ];
    for &(slot, last_up) in down {
        all[usize::from(slot)] = SlotHealth { up: false, last_up };
    }
    HealthView::new(all)
}

fn answer(p: &CompiledPolicies, profile: &str, health: &HealthView) -> (String, Decision<'static>) {
    let root = root_of(p, profile);
    let shed = ShedView::default();
    let c = client(EU_WEST, v4_subnet(1), 24);
    // Leak-free: the decision borrows `p`; copy out what tests need.
    let d = evaluate_with_health(p, root, &c, &shed, health);
    let text = cname_of(&d).unwrap_or_default();
    let trace_only = Decision {
        target: Target::Addresses { v4: &[], v6: &[] },
        ttl: d.ttl,
        scope: d.scope,
        left_out: d.left_out,
        trace: d.trace,
    };
    (text, trace_only)
}

fn slot_of(p: &CompiledPolicies, target: &str) -> u16 {
    match p.monitors().iter().position(|m| m.target == target) {
        Some(i) => i as u16,
        None => panic!("no monitor {target} in {:?}", p.monitors()),
    }
}

#[test]
fn failover_takes_the_first_endpoint_that_is_up() {
    let p = compile_ok(&failover(None, false), &ControlKnobs::default());
    let primary = slot_of(&p, "http://127.0.0.1:1/health");
    let secondary = slot_of(&p, "http://127.0.0.1:2/health");
    let (up, d) = answer(&p, "f", &view(&[], 2));
    assert_eq!(up, "primary.example.net.");
    assert_eq!(
        d.trace.steps[0].map(|s| s.health),
        Some(StepHealth::Unchanged)
    );
    let (moved, d) = answer(&p, "f", &view(&[(primary, 1)], 2));
    assert_eq!(moved, "secondary.example.net.");
    assert_eq!(
        d.trace.steps[0].map(|s| s.health),
        Some(StepHealth::Skipped)
    );
    let (both, _) = answer(&p, "f", &view(&[(primary, 1), (secondary, 1)], 2));
    assert_eq!(
        both, "tertiary.example.net.",
        "the unmonitored endpoint is always up"
    );
    // A view built for other policies (no slots) takes nothing out.
    let (none, _) = answer(&p, "f", &HealthView::default());
    assert_eq!(none, "primary.example.net.");
}

#[test]
fn all_down_rules_never_answer_empty() {
    let text = |rule: Option<&str>| failover(rule, true);
    let down = |p: &CompiledPolicies, last: [u64; 3]| {
        let slots = [
            slot_of(p, "http://127.0.0.1:1/health"),
            slot_of(p, "http://127.0.0.1:2/health"),
            slot_of(p, "http://127.0.0.1:3/"),
        ];
        view(
            &[
                (slots[0], last[0]),
                (slots[1], last[1]),
                (slots[2], last[2]),
            ],
            3,
        )
    };
    let p = compile_ok(&text(None), &ControlKnobs::default());
    let (serve_all, d) = answer(&p, "f", &down(&p, [3, 5, 4]));
    assert_eq!(
        serve_all, "primary.example.net.",
        "default serve-all: as if all were up"
    );
    assert_eq!(
        d.trace.steps[0].map(|s| s.health),
        Some(StepHealth::AllDown(AllDown::ServeAll))
    );
    let p = compile_ok(&text(Some("serve-last-healthy")), &ControlKnobs::default());
    let (last, _) = answer(&p, "f", &down(&p, [3, 5, 4]));
    assert_eq!(last, "secondary.example.net.", "secondary was up last");
    let (never, _) = answer(&p, "f", &down(&p, [0, 0, 0]));
    assert_eq!(
        never, "primary.example.net.",
        "none ever up: the first candidate"
    );
    let p = compile_ok(&text(Some("fallback:tertiary")), &ControlKnobs::default());
    let (fallback, _) = answer(&p, "f", &down(&p, [3, 5, 4]));
    assert_eq!(fallback, "tertiary.example.net.");
    let p = compile_ok(&text(Some("fallback:backup")), &ControlKnobs::default());
    let (profile, d) = answer(&p, "f", &down(&p, [3, 5, 4]));
    assert_eq!(
        profile, "static.example.net.",
        "fallback to another profile"
    );
    assert_eq!(d.trace.steps[1].map(|s| s.profile), p.profile_id("backup"));
    // The fallback profile is among the possible answers (DNSSEC signs it ahead of time).
    let targets = p.possible_targets(root_of(&p, "f"));
    assert!(targets.iter().any(
        |t| matches!(t, Target::Cname { name, .. } if name.to_ascii() == "static.example.net.")
    ));
    let (up, _) = answer(&p, "f", &view(&[], 3));
    assert_eq!(
        up, "primary.example.net.",
        "the fallback is never served while one is up"
    );
}

#[test]
fn one_target_is_one_slot_and_conflicting_settings_are_refused() {
    let shared = format!(
        "{TOPOLOGY}
[profiles.a]
type = \"failover\"
ttl = 30
[[profiles.a.endpoints]]
name = \"x\"
cname = \"x.example.net.\"
{m}
[profiles.b]
type = \"weighted\"
ttl = 30
[[profiles.b.endpoints]]
name = \"y\"
cname = \"y.example.net.\"
weight = 1
{m}
[[profiles.b.endpoints]]
name = \"z\"
cname = \"z.example.net.\"
weight = 1
monitor = {{ tcp = \"127.0.0.1:9\" }}
",
        m = monitor("http://127.0.0.1:1/health")
    );
    let p = compile_ok(&shared, &ControlKnobs::default());
    assert_eq!(p.monitors().len(), 2, "{:?}", p.monitors());
    assert_eq!(p.monitors()[1].target, "tcp:127.0.0.1:9");
    assert_eq!(p.monitors()[1].fall, 3, "defaults");
    let conflicting = shared.replacen("fall = 2", "fall = 4", 1);
    let errors = compile_err(&conflicting, &ControlKnobs::default());
    assert_error(
        &errors,
        "profiles.b.endpoints[0].monitor",
        "also monitored by profiles.a.endpoints[0].monitor with other settings",
    );
}

#[test]
fn monitor_urls_are_parsed_into_host_port_and_request_path() {
    let with = |a: &str, b: &str| {
        format!(
            "{TOPOLOGY}
[profiles.f]
type = \"failover\"
ttl = 30
[[profiles.f.endpoints]]
name = \"a\"
cname = \"a.example.net.\"
{}
[[profiles.f.endpoints]]
name = \"b\"
cname = \"b.example.net.\"
{}
",
            monitor(a),
            monitor(b)
        )
    };
    let p = compile_ok(
        &with(
            "http://[::1]:8080?ready=1",
            "https://Health.Example.NET/a/b%20c",
        ),
        &ControlKnobs::default(),
    );
    let targets: Vec<_> = p.monitors().iter().map(|m| m.target.as_str()).collect();
    assert_eq!(
        targets,
        [
            "http://[::1]:8080/?ready=1",
            "https://health.example.net:443/a/b%20c"
        ]
    );
}

#[test]
fn monitor_config_errors_say_why() {
    let with = |endpoint_extra: &str| {
        format!(
            "{TOPOLOGY}
[profiles.f]
type = \"failover\"
ttl = 30
[[profiles.f.endpoints]]
name = \"a\"
cname = \"a.example.net.\"
{endpoint_extra}
[[profiles.f.endpoints]]
name = \"b\"
cname = \"b.example.net.\"
"
        )
    };
    let cases = [
        (
            format!("always_serve = true\n{}", monitor("http://127.0.0.1:1/")),
            "profiles.f.endpoints[0].always_serve",
            "never health-checked",
        ),
        (
            "always_serve = false".to_owned(),
            "profiles.f.endpoints[0].always_serve",
            "needs a monitor",
        ),
        (
            "monitor = { url = \"ftp://x/\" }".to_owned(),
            "profiles.f.endpoints[0].monitor.url",
            "http:// or https://",
        ),
        (
            "monitor = { url = \"http://user:secret@h/\" }".to_owned(),
            "profiles.f.endpoints[0].monitor.url",
            "credentials in the URL are not supported",
        ),
        (
            "monitor = { url = \"http://h/a b\" }".to_owned(),
            "profiles.f.endpoints[0].monitor.url",
            "is not a URL",
        ),
        (
            "monitor = { url = \"http://h/ready#top\" }".to_owned(),
            "profiles.f.endpoints[0].monitor.url",
            "no fragment",
        ),
        (
            "monitor = { url = \"http://[::1/\" }".to_owned(),
            "profiles.f.endpoints[0].monitor.url",
            "is not a URL",
        ),
        (
            "monitor = { url = \"http://h:0/\" }".to_owned(),
            "profiles.f.endpoints[0].monitor.url",
            "1..=65535",
        ),
        (
            "monitor = { tcp = \"127.0.0.1\" }".to_owned(),
            "profiles.f.endpoints[0].monitor.tcp",
            "needs a port",
        ),
        (
            "monitor = { url = \"http://h/\", tcp = \"h:1\" }".to_owned(),
            "profiles.f.endpoints[0].monitor",
            "only one of url, tcp or dns",
        ),
        (
            "monitor = { url = \"http://h/\", interval_ms = 1000, timeout_ms = 1000 }".to_owned(),
            "profiles.f.endpoints[0].monitor.timeout_ms",
            "below interval_ms",
        ),
        (
            "monitor = { url = \"http://h/\", fall = 0 }".to_owned(),
            "profiles.f.endpoints[0].monitor.fall",
            "outside 1..=100",
        ),
        (
            "monitor = { url = \"http://h/\", startup = \"maybe\" }".to_owned(),
            "profiles.f.endpoints[0].monitor.startup",
            "\"up\", \"down\", \"unknown\"",
        ),
        (
            "monitor = { tcp = \"h:1\", expect_body = \"ok\" }".to_owned(),
            "profiles.f.endpoints[0].monitor.expect_body",
            "only HTTP checks",
        ),
        (
            "monitor = { url = \"https://h/\", tls = \"sha256:12\" }".to_owned(),
            "profiles.f.endpoints[0].monitor.tls",
            "64 hex digits",
        ),
        (
            "monitor = { dns = \"127.0.0.1:53\" }".to_owned(),
            "profiles.f.endpoints[0].monitor.dns_name",
            "required",
        ),
    ];
    for (extra, path, needle) in cases {
        let errors = compile_err(&with(&extra), &ControlKnobs::default());
        assert_error(&errors, path, needle);
    }
    let all_down = with(&monitor("http://127.0.0.1:1/"))
        .replace("ttl = 30\n", "ttl = 30\nall_down = \"fallback:nowhere\"\n");
    let errors = compile_err(&all_down, &ControlKnobs::default());
    assert_error(
        &errors,
        "profiles.f.all_down",
        "neither an endpoint of this profile nor a profile",
    );
    let bad_rule = all_down.replace("fallback:nowhere", "serve-none");
    let errors = compile_err(&bad_rule, &ControlKnobs::default());
    assert_error(&errors, "profiles.f.all_down", "is not one of");
}

fn knobs(profile: &str, endpoint: &str, knob: EndpointKnobs) -> ControlKnobs {
    let mut k = ControlKnobs::default();
    k.profiles
        .entry(profile.to_owned())
        .or_default()
        .endpoints
        .insert(endpoint.to_owned(), knob);
    k
}

#[test]
fn operator_overrides_win_over_probes() {
    let text = failover(Some("fallback:tertiary"), false);
    let forced = knobs(
        "f",
        "primary",
        EndpointKnobs {
            force_up: Some(true),
            ..EndpointKnobs::default()
        },
    );
    let p = compile_ok(&text, &forced);
    let primary = slot_of(&p, "http://127.0.0.1:1/health");
    let (answer_forced, _) = answer(&p, "f", &view(&[(primary, 1)], 2));
    assert_eq!(
        answer_forced, "primary.example.net.",
        "forced up although down"
    );
    let disabled = knobs(
        "f",
        "primary",
        EndpointKnobs {
            enabled: Some(false),
            force_up: Some(true),
            ..EndpointKnobs::default()
        },
    );
    let p = compile_ok(&text, &disabled);
    let (answer_disabled, _) = answer(&p, "f", &view(&[], 2));
    assert_eq!(
        answer_disabled, "secondary.example.net.",
        "disabled wins over force up"
    );
    let unmonitored = knobs(
        "f",
        "tertiary",
        EndpointKnobs {
            force_up: Some(true),
            ..EndpointKnobs::default()
        },
    );
    let errors = compile_err(&text, &unmonitored);
    assert_error(
        &errors,
        "control.profiles.f.endpoints.tertiary.force_up",
        "only endpoints with a monitor",
    );
    let fallback_off = knobs(
        "f",
        "tertiary",
        EndpointKnobs {
            enabled: Some(false),
            ..EndpointKnobs::default()
        },
    );
    let errors = compile_err(&text, &fallback_off);
    assert_error(&errors, "profiles.f.all_down", "which is disabled");
}

#[test]
fn weighted_moves_only_the_down_endpoints_subnets() {
    let text = format!(
        "{TOPOLOGY}
[profiles.w]
type = \"weighted\"
ttl = 30
[[profiles.w.endpoints]]
name = \"e0\"
cname = \"e0.example.net.\"
weight = 50
{}
[[profiles.w.endpoints]]
name = \"e1\"
cname = \"e1.example.net.\"
weight = 30
{}
[[profiles.w.endpoints]]
name = \"e2\"
cname = \"e2.example.net.\"
weight = 20
",
        monitor("http://127.0.0.1:1/"),
        monitor("http://127.0.0.1:2/"),
    );
    let p = compile_ok(&text, &ControlKnobs::default());
    let root = root_of(&p, "w");
    let shed = ShedView::default();
    let all_up = view(&[], 2);
    let e0_down = view(&[(slot_of(&p, "http://127.0.0.1:1/"), 1)], 2);
    let mut moved = 0;
    for i in 0..2000 {
        let c = client(EU_WEST, v4_subnet(i), 24);
        let before = cname_of(&evaluate_with_health(&p, root, &c, &shed, &all_up));
        let after = cname_of(&evaluate_with_health(&p, root, &c, &shed, &e0_down));
        assert_ne!(after.as_deref(), Some("e0.example.net."));
        if before.as_deref() == Some("e0.example.net.") {
            moved += 1;
        } else {
            assert_eq!(before, after, "a subnet on an endpoint that is up moved");
        }
    }
    assert!(moved > 800, "about half the subnets were on e0: {moved}");
}

#[test]
fn geo_falls_back_as_for_a_disabled_endpoint_then_anywhere_up() {
    let text = format!(
        "{TOPOLOGY}
[profiles.g]
type = \"geo\"
ttl = 30
[[profiles.g.endpoints]]
name = \"eu\"
cname = \"eu.example.net.\"
regions = [\"eu-west\"]
{}
[[profiles.g.endpoints]]
name = \"north\"
cname = \"north.example.net.\"
regions = [\"eu-north\"]
{}
[[profiles.g.endpoints]]
name = \"na\"
cname = \"na.example.net.\"
regions = [\"na-east\", \"na-west\", \"af-south\"]
",
        monitor("http://127.0.0.1:1/"),
        monitor("http://127.0.0.1:2/"),
    );
    let p = compile_ok(&text, &ControlKnobs::default());
    let root = root_of(&p, "g");
    let shed = ShedView::default();
    let eu_down = view(&[(slot_of(&p, "http://127.0.0.1:1/"), 1)], 2);
    let both_down = view(
        &[
            (slot_of(&p, "http://127.0.0.1:1/"), 1),
            (slot_of(&p, "http://127.0.0.1:2/"), 1),
        ],
        2,
    );
    let c = client(EU_WEST, v4_subnet(1), 16);
    let d = evaluate_with_health(&p, root, &c, &shed, &eu_down);
    assert_eq!(cname_of(&d).as_deref(), Some("north.example.net."));
    assert_eq!(
        d.trace.steps[0].map(|s| s.choice),
        Some(StepChoice::Geo(GeoRoute::Neighbour(EU_NORTH)))
    );
    let d = evaluate_with_health(&p, root, &c, &shed, &both_down);
    assert_eq!(
        cname_of(&d).as_deref(),
        Some("na.example.net."),
        "neighbour na-east serves na"
    );
    let north = client(EU_NORTH, v4_subnet(1), 16);
    let d = evaluate_with_health(&p, root, &north, &shed, &both_down);
    assert_eq!(cname_of(&d).as_deref(), Some("na.example.net."));
    assert_eq!(
        d.trace.steps[0].map(|s| s.choice),
        Some(StepChoice::Geo(GeoRoute::Elsewhere)),
        "nothing on the route is up: any endpoint that is up"
    );
}

#[test]
fn a_nested_profile_with_nothing_up_is_down_for_its_parent() {
    let text = format!(
        "{TOPOLOGY}
[profiles.top]
type = \"failover\"
ttl = 30
[[profiles.top.endpoints]]
name = \"inner\"
profile = \"inner\"
[[profiles.top.endpoints]]
name = \"last\"
cname = \"last.example.net.\"
[profiles.inner]
type = \"weighted\"
ttl = 30
[[profiles.inner.endpoints]]
name = \"a\"
cname = \"a.example.net.\"
weight = 1
{}
[[profiles.inner.endpoints]]
name = \"b\"
cname = \"b.example.net.\"
weight = 1
{}
",
        monitor("http://127.0.0.1:1/"),
        monitor("http://127.0.0.1:2/"),
    );
    let p = compile_ok(&text, &ControlKnobs::default());
    let a = slot_of(&p, "http://127.0.0.1:1/");
    let b = slot_of(&p, "http://127.0.0.1:2/");
    let (one_down, _) = answer(&p, "top", &view(&[(a, 1)], 2));
    assert_eq!(one_down, "b.example.net.");
    let (both, d) = answer(&p, "top", &view(&[(a, 1), (b, 1)], 2));
    assert_eq!(both, "last.example.net.");
    assert_eq!(
        d.trace.steps[0].map(|s| s.health),
        Some(StepHealth::Skipped)
    );
    let shed = ShedView::default();
    let c = client(EU_WEST, v4_subnet(1), 24);
    let text = explain_with_health(
        &p,
        root_of(&p, "top"),
        &c,
        &shed,
        &view(&[(a, 1), (b, 1)], 2),
    );
    assert!(text.contains("skipped for health: inner down"), "{text}");
}
