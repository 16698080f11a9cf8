//! A one-line, human summary of how the knobs changed between two control files (what the
//! history records with each version, and what the CLI prints for an edit or a diff).
//!
//! Owns only the wording; reading and comparing the files is the caller's.

use std::fmt::Write as _;

use super::ControlFile;
use crate::policy::{EndpointKnobs, ForcedAnswer, RegionKnobs};

/// The most changes [`summarize`] spells out before counting the rest.
const MAX_SUMMARY_ITEMS: usize = 12;

/// A one-line, human description of how the knobs changed from `old` to `new`, e.g.
/// `critical.frontdoor weight 100->0; eu-west drain off->on; shield auto->frozen`, or
/// `no knob changes`. An unset knob reads `default` (the config's value applies). The serial
/// is not a knob and is not mentioned. For a first version pass `ControlFile::default()`.
pub fn summarize(old: &ControlFile, new: &ControlFile) -> String {
    let mut changes = Vec::new();
    endpoint_changes(old, new, &mut changes);
    region_changes(old, new, &mut changes);
    if old.shield != new.shield {
        changes.push(format!(
            "shield {}->{}",
            old.shield.name(),
            new.shield.name()
        ));
    }
    for gate in union(old.gates.keys(), new.gates.keys()) {
        let (a, b) = (old.gates.get(gate), new.gates.get(gate));
        if a != b {
            let name = |v: Option<&String>| v.map_or("unset".to_owned(), |v| v.clone());
            changes.push(format!("gate {gate} {}->{}", name(a), name(b)));
        }
    }
    let overrides = new
        .overrides
        .iter()
        .map(|o| format!("OVERRIDE {} by {}: {}", o.rule, o.by, o.reason));
    if changes.is_empty() {
        let overrides: Vec<String> = overrides.collect();
        if overrides.is_empty() {
            return "no knob changes".to_owned();
        }
        return overrides.join("; ");
    }
    let overrides: Vec<String> = overrides.collect();
    let total = changes.len();
    let mut line = changes[..total.min(MAX_SUMMARY_ITEMS)].join("; ");
    if total > MAX_SUMMARY_ITEMS {
        let _ = write!(line, "; and {} more", total - MAX_SUMMARY_ITEMS);
    }
    // Overrides are never cut: the history must say who let a change through, and why.
    for o in overrides {
        let _ = write!(line, "; {o}");
    }
    line
}

fn endpoint_changes(old: &ControlFile, new: &ControlFile, out: &mut Vec<String>) {
    let none = EndpointKnobs::default();
    let profiles = union(old.profiles.keys(), new.profiles.keys());
    for profile in profiles {
        let old_eps = old.profiles.get(profile).map(|p| &p.endpoints);
        let new_eps = new.profiles.get(profile).map(|p| &p.endpoints);
        let names = union(
            old_eps.into_iter().flat_map(|e| e.keys()),
            new_eps.into_iter().flat_map(|e| e.keys()),
        );
        for endpoint in names {
            let a = old_eps.and_then(|e| e.get(endpoint)).unwrap_or(&none);
            let b = new_eps.and_then(|e| e.get(endpoint)).unwrap_or(&none);
            if a.weight != b.weight {
                out.push(format!(
                    "{profile}.{endpoint} weight {}->{}",
                    or_default(a.weight),
                    or_default(b.weight)
                ));
            }
            if a.enabled != b.enabled {
                out.push(format!(
                    "{profile}.{endpoint} enabled {}->{}",
                    on_off_default(a.enabled),
                    on_off_default(b.enabled)
                ));
            }
        }
    }
}

fn region_changes(old: &ControlFile, new: &ControlFile, out: &mut Vec<String>) {
    let none = RegionKnobs::default();
    for region in union(old.regions.keys(), new.regions.keys()) {
        let a = old.regions.get(region).unwrap_or(&none);
        let b = new.regions.get(region).unwrap_or(&none);
        if a.drain != b.drain {
            out.push(format!(
                "{region} drain {}->{}",
                on_off(a.drain),
                on_off(b.drain)
            ));
        }
        if a.force != b.force {
            out.push(format!(
                "{region} force {}->{}",
                force_name(a.force.as_ref()),
                force_name(b.force.as_ref())
            ));
        }
    }
}

/// Sorted, deduplicated union of two sets of names.
fn union<'a>(
    a: impl IntoIterator<Item = &'a String>,
    b: impl IntoIterator<Item = &'a String>,
) -> Vec<&'a String> {
    let mut all: Vec<&String> = a.into_iter().chain(b).collect();
    all.sort();
    all.dedup();
    all
}

fn or_default(weight: Option<u32>) -> String {
    weight.map_or_else(|| "default".to_owned(), |w| w.to_string())
}

fn on_off(b: bool) -> &'static str {
    if b {
        "on"
    } else {
        "off"
    }
}

fn on_off_default(b: Option<bool>) -> &'static str {
    b.map_or("default", on_off)
}

fn force_name(force: Option<&ForcedAnswer>) -> String {
    force.map_or_else(|| "none".to_owned(), ToString::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn control(text: &str) -> ControlFile {
        ControlFile::parse(text, Path::new("c.toml")).unwrap()
    }

    #[test]
    fn summarize_weights_and_enabled() {
        let old = control(
            "[profiles.critical.endpoints]\nfrontdoor = { weight = 100 }\nalt-cdn = { weight = 0 }\nappgw = { weight = 0 }\n",
        );
        let new = control(
            "[profiles.critical.endpoints]\nfrontdoor = { weight = 0 }\nalt-cdn = { weight = 100 }\nappgw = { weight = 0, enabled = false }\n[profiles.warm.endpoints]\nx = { weight = 5 }\n",
        );
        assert_eq!(
            summarize(&old, &new),
            "critical.alt-cdn weight 0->100; critical.appgw enabled default->off; \
             critical.frontdoor weight 100->0; warm.x weight default->5"
        );
        assert_eq!(
            summarize(&new, &old),
            "critical.alt-cdn weight 100->0; critical.appgw enabled off->default; \
             critical.frontdoor weight 0->100; warm.x weight 5->default"
        );
    }

    #[test]
    fn summarize_regions_and_shield() {
        let old = control("shield = \"auto\"\n[regions.eu-west]\nforce = \"regional\"\n");
        let new = control(
            "serial = 9\nshield = \"frozen\"\n[regions.eu-west]\ndrain = true\n[regions.us-east]\nforce = \"fallback:fb-us\"\n",
        );
        assert_eq!(
            summarize(&old, &new),
            "eu-west drain off->on; eu-west force regional->none; \
             us-east force none->fallback:fb-us; shield auto->frozen"
        );
    }

    #[test]
    fn summarize_no_change_ignores_serial_and_layout() {
        let a = control("serial = 1\n[profiles.p.endpoints]\ne = { weight = 1 }\n");
        let b = control("serial = 2\n# moved\n[profiles.p.endpoints.e]\nweight = 1\n");
        assert_eq!(summarize(&a, &b), "no knob changes");
        assert_eq!(
            summarize(&ControlFile::default(), &ControlFile::default()),
            "no knob changes"
        );
    }

    #[test]
    fn summarize_caps_long_changes() {
        let mut text = String::from("[profiles.p.endpoints]\n");
        for i in 0..20 {
            text.push_str(&format!("e{i:02} = {{ weight = {i} }}\n"));
        }
        let line = summarize(&ControlFile::default(), &control(&text));
        assert_eq!(line.matches("weight default->").count(), MAX_SUMMARY_ITEMS);
        assert!(line.ends_with("; and 8 more"), "{line}");
    }
}
