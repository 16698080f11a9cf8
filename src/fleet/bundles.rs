//! Staged rollout of the nodes' **bundles** — config file, zone files, GeoIP database — with the
//! same waves, bake time, gates, halt and rollback as control versions, driven by the same
//! coordinator and the same pure state machine (`crate::rollout`).
//!
//! Bundles travel with the deployment (files on every node), not through etcd, and differ per
//! node (a node's config names its own addresses), so a bundle rollout is not "one text for
//! everyone". Each node captures its live files as a bundle with an id (a hash of the copy,
//! `crate::reload::bundle`), tastes it, reports it in its registry entry ([`BundleReport`]) and
//! keeps serving its bundle. The coordinator numbers **generations**: generation N is rolled
//! out with candidate revision N and last known good N-1, and [`BundleRecord`] (under
//! `<prefix>/rollout/bundle`) maps, per node, the generations to the node's own bundle ids:
//! `lkg` is the bundle it served when the generation began, `candidate` the bundle it reported
//! when its wave was released (its own files then; the bundle it serves if nothing changed).
//! [`BundleRecord::reports`] translates each node's ids into generations for the state machine,
//! and [`BundleRecord::allowed`] tells each node which of its bundles to serve.
//!
//! A generation begins when some node reports a bundle (tasted, or refused by its taster) that
//! it neither serves nor was already rolled out or halted; a halted generation is not begun
//! again for the same files (`rollout resume --bundles` retries it, new files begin the next).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::store::NodeRecord;
use crate::rollout::{NodeReport, Phase, Plan, Revision, Rollout};

/// A node's bundles, in its registry entry.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct BundleReport {
    /// The bundle it serves.
    pub serving: String,
    /// Its live files' bundle, tasted, waiting for its wave.
    pub pending: Option<String>,
    /// The newest bundle it refused, and why.
    pub refused: Option<(String, String)>,
}

impl BundleReport {
    /// The bundle the node would serve next: the one waiting, else the one refused.
    fn wanted(&self) -> Option<&str> {
        self.pending
            .as_deref()
            .or(self.refused.as_ref().map(|(id, _)| id.as_str()))
            .filter(|id| *id != self.serving)
    }
}

/// One node's bundle ids for a generation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct NodeBundles {
    /// Its bundle in the last known good generation.
    pub lkg: String,
    /// Its bundle in the candidate generation (set when its wave is released).
    pub candidate: Option<String>,
    /// The bundle it would have served next when the generation began (so that a halted
    /// generation is not begun again for the same files).
    #[serde(default)]
    pub seen: Option<String>,
}

/// `<prefix>/rollout/bundle`: the bundle generation being rolled out (or the last one).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BundleRecord {
    pub rollout: Rollout,
    pub nodes: BTreeMap<String, NodeBundles>,
}

/// The staging nodes' registry entries that report bundles, by name.
fn staging(
    records: &[NodeRecord],
) -> impl Iterator<Item = (&NodeRecord, &NodeReport, &BundleReport)> {
    records
        .iter()
        .filter_map(|r| Some((r, r.rollout.as_ref()?, r.bundle.as_ref()?)))
}

impl BundleRecord {
    /// The first state: generation 0, every node's bundle is its last known good.
    pub fn settled(records: &[NodeRecord], now_ms: u64) -> BundleRecord {
        let nodes = staging(records)
            .map(|(r, _, b)| {
                let entry = NodeBundles {
                    lkg: b.serving.clone(),
                    candidate: Some(b.serving.clone()),
                    seen: None,
                };
                (r.name.clone(), entry)
            })
            .collect();
        BundleRecord {
            rollout: Rollout::settled(0, now_ms),
            nodes,
        }
    }

    /// The bundle `node` is to serve; `None`: no say (a node this generation does not know
    /// serves what it has until the next one).
    pub fn allowed(&self, node: &str) -> Option<&str> {
        let entry = self.nodes.get(node)?;
        let candidate = entry.candidate.as_deref();
        let released = self.rollout.allowed(node) == self.rollout.candidate;
        match (released, candidate) {
            (true, Some(candidate)) => Some(candidate),
            _ => Some(entry.lkg.as_str()),
        }
    }

    /// The node's bundles as the state machine sees them: ids translated into generations.
    pub fn reports(&self, records: &[NodeRecord]) -> BTreeMap<String, NodeReport> {
        let (candidate, lkg) = (self.rollout.candidate, self.rollout.lkg);
        staging(records)
            .map(|(record, report, bundles)| {
                let entry = self.nodes.get(&record.name);
                let generation = |id: &str| -> Option<Revision> {
                    let entry = entry?;
                    if entry.candidate.as_deref() == Some(id) {
                        Some(candidate)
                    } else {
                        (entry.lkg == id).then_some(lkg)
                    }
                };
                let serving = generation(&bundles.serving);
                let refused = bundles.refused.as_ref().and_then(|(id, reason)| {
                    let refused = generation(id).filter(|g| *g == candidate && candidate != lkg);
                    refused.map(|g| (g, format!("bundle {id}: {reason}")))
                });
                // Files that reach a node after its wave was released (its taster was slower,
                // or the deployment reached it late) were not vetted by the waves before it:
                // halt, and the next generation begins with them, canary first.
                let captured = entry.and_then(|e| e.candidate.as_deref());
                let changed = match (captured, bundles.wanted()) {
                    (Some(captured), Some(wanted)) if self.rollout.is_running() => {
                        (captured != wanted).then(|| {
                            let why = format!(
                                "its files changed during the rollout (now bundle {wanted}); \
                                 the next generation rolls them out, canary first"
                            );
                            (candidate, why)
                        })
                    }
                    _ => None,
                };
                let refused = refused.or(changed);
                let translated = NodeReport {
                    serving,
                    tasting: None,
                    refused,
                    probes: report
                        .probes
                        .as_ref()
                        .map(|(_, results)| (serving.unwrap_or(Revision::MAX), results.clone())),
                    ..report.clone()
                };
                (record.name.clone(), translated)
            })
            .collect()
    }

    /// One coordinator decision from the registry: `Some` (the next state and what to log)
    /// when anything changed.
    pub fn next(
        &self,
        records: &[NodeRecord],
        plan: &Plan,
        now_ms: u64,
    ) -> Option<(BundleRecord, Vec<String>)> {
        let mut next = self.clone();
        let reports = self.reports(records);
        let log = if self.rollout.is_running() {
            let log = next.rollout.step(&reports, now_ms);
            next.capture(records);
            next.absorb(records);
            log
        } else {
            next.mark(&reports);
            if !matches!(next.rollout.phase, Phase::Completed { .. }) {
                next.absorb(records);
            }
            match next.begin(records, plan, now_ms) {
                Some(begun) => {
                    let line = begun.begun_line();
                    next = begun;
                    vec![line]
                }
                None => Vec::new(),
            }
        };
        (next != *self).then_some((next, log))
    }

    /// After a halt or an abort: the machine marks who is back on the last known good.
    fn mark(&mut self, reports: &BTreeMap<String, NodeReport>) {
        let _ = self.rollout.step(reports, 0);
    }

    /// While a generation runs or stays halted, the files that arrive on the nodes of its
    /// unreleased waves belong to it (a deployment reaches the nodes one after another): they
    /// are captured when the wave is released, and after a halt they begin nothing by
    /// themselves. A node's files changing again after its wave was released (the fix of a
    /// bad change) begin the next generation.
    fn absorb(&mut self, records: &[NodeRecord]) {
        for (record, _, bundles) in staging(records) {
            if let Some(entry) = self.nodes.get_mut(&record.name) {
                if entry.candidate.is_none() {
                    entry.seen = bundles.wanted().map(str::to_string);
                }
            }
        }
    }

    /// Generation N+1 if some node has a bundle it neither serves nor had in this generation.
    fn begin(&self, records: &[NodeRecord], plan: &Plan, now_ms: u64) -> Option<BundleRecord> {
        let news = staging(records).any(|(record, _, bundles)| {
            let Some(wanted) = bundles.wanted() else {
                return false;
            };
            let entry = self.nodes.get(&record.name);
            let candidate = entry.and_then(|e| e.candidate.as_deref());
            let seen = entry.and_then(|e| e.seen.as_deref());
            candidate != Some(wanted) && seen != Some(wanted)
        });
        if !news {
            return None;
        }
        let completed = matches!(self.rollout.phase, Phase::Completed { .. });
        let nodes = staging(records)
            .map(|(record, _, bundles)| {
                let lkg = match self.nodes.get(&record.name) {
                    Some(entry) if completed => {
                        entry.candidate.clone().unwrap_or(entry.lkg.clone())
                    }
                    Some(entry) => entry.lkg.clone(),
                    None => bundles.serving.clone(),
                };
                let entry = NodeBundles {
                    lkg,
                    candidate: None,
                    seen: bundles.wanted().map(str::to_string),
                };
                (record.name.clone(), entry)
            })
            .collect();
        let generation = self.rollout.candidate + 1;
        let mut begun = BundleRecord {
            rollout: Rollout::settled(generation, now_ms),
            nodes,
        };
        let reports = begun.reports(records);
        begun.rollout = Rollout::begin(
            generation,
            generation - 1,
            "config/zone/GeoIP files",
            false,
            plan,
            &reports,
            now_ms,
        );
        begun.capture(records);
        Some(begun)
    }

    /// The nodes of the released waves that have no candidate yet get the bundle they would
    /// serve next (or the one they serve: their files did not change).
    fn capture(&mut self, records: &[NodeRecord]) {
        for (record, _, bundles) in staging(records) {
            let released = self.rollout.allowed(&record.name) == self.rollout.candidate
                && self.rollout.is_running();
            match self.nodes.get_mut(&record.name) {
                Some(entry) if released && entry.candidate.is_none() => {
                    let id = bundles.wanted().unwrap_or(&bundles.serving);
                    entry.candidate = Some(id.to_string());
                }
                _ => {}
            }
        }
    }

    fn begun_line(&self) -> String {
        let waves: Vec<String> = self
            .rollout
            .waves
            .iter()
            .map(|wave| format!("[{}]", wave.join(", ")))
            .collect();
        format!(
            "bundle rollout of generation {} (config/zone/GeoIP files) begun: waves {}",
            self.rollout.candidate,
            waves.join(" ")
        )
    }

    /// `rollout status` as lines of text: the machine's, then each node's bundles.
    pub fn describe(&self, now_ms: u64) -> Vec<String> {
        let mut lines: Vec<String> = self
            .rollout
            .describe(now_ms)
            .into_iter()
            .map(|line| line.replacen("rollout of revision", "bundle rollout of generation", 1))
            .collect();
        for (name, entry) in &self.nodes {
            let candidate = entry.candidate.as_deref().unwrap_or("(not released)");
            lines.push(format!(
                "  {name}: bundle {candidate} (last known good {})",
                entry.lkg
            ));
        }
        lines
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, serving: &str, pending: Option<&str>) -> NodeRecord {
        NodeRecord {
            name: name.into(),
            rollout: Some(NodeReport {
                boot: format!("{name}-boot"),
                ..NodeReport::default()
            }),
            bundle: Some(BundleReport {
                serving: serving.into(),
                pending: pending.map(str::to_string),
                refused: None,
            }),
            ..NodeRecord::default()
        }
    }

    fn plan() -> Plan {
        Plan {
            waves: vec![vec!["ns1".into()], vec!["ns2".into()]],
            bake_secs: 1,
            ..Plan::default()
        }
    }

    #[test]
    fn a_bundle_reaches_the_canary_then_after_the_bake_the_next_wave() {
        let settled = BundleRecord::settled(&[node("ns1", "a1", None), node("ns2", "a2", None)], 0);
        assert_eq!(settled.allowed("ns1"), Some("a1"));
        // Nothing new: nothing begins.
        let same = [node("ns1", "a1", None), node("ns2", "a2", None)];
        assert!(settled.next(&same, &plan(), 10).is_none());
        // New files on both nodes: generation 1, the canary first.
        let staged = [node("ns1", "a1", Some("b1")), node("ns2", "a2", Some("b2"))];
        let (begun, log) = settled.next(&staged, &plan(), 100).expect("begun");
        assert!(log[0].contains("generation 1"), "{log:?}");
        assert_eq!(begun.allowed("ns1"), Some("b1"));
        assert_eq!(begun.allowed("ns2"), Some("a2"));
        // The canary serves it and bakes; then ns2 gets its own new bundle.
        let canary = [node("ns1", "b1", None), node("ns2", "a2", Some("b2"))];
        let (serving, _) = begun.next(&canary, &plan(), 200).expect("step");
        let (baked, log) = serving.next(&canary, &plan(), 1300).expect("released");
        assert!(log[0].contains("released wave 2"), "{log:?}");
        assert_eq!(baked.allowed("ns2"), Some("b2"));
        let all = [node("ns1", "b1", None), node("ns2", "b2", None)];
        let (both, _) = baked.next(&all, &plan(), 1400).expect("step");
        let (done, _) = both.next(&all, &plan(), 2500).expect("completed");
        assert!(matches!(done.rollout.phase, Phase::Completed { .. }));
        assert!(done.next(&all, &plan(), 2600).is_none());
    }

    #[test]
    fn a_bundle_the_canary_refuses_halts_and_is_not_begun_again() {
        let settled = BundleRecord::settled(&[node("ns1", "a1", None), node("ns2", "a2", None)], 0);
        let mut refusing = node("ns1", "a1", None);
        if let Some(b) = refusing.bundle.as_mut() {
            b.refused = Some(("b1".into(), "taster killed by signal 6".into()));
        }
        let staged = [refusing, node("ns2", "a2", Some("b2"))];
        let (begun, _) = settled.next(&staged, &plan(), 100).expect("begun");
        let (halted, log) = begun.next(&staged, &plan(), 200).expect("halted");
        assert!(log[0].contains("halted"), "{log:?}");
        assert!(
            log[0].contains("bundle b1: taster killed by signal 6"),
            "{log:?}"
        );
        assert_eq!(halted.allowed("ns1"), Some("a1"));
        assert_eq!(halted.allowed("ns2"), Some("a2"));
        // The same files begin nothing again (ns2's b2 was never released, but seen), nor do
        // files arriving on an unreleased node after the halt.
        assert!(halted.next(&staged, &plan(), 300).is_none());
        let mut late = staged.clone();
        late[1] = node("ns2", "a2", Some("b2-late"));
        let (absorbed, log) = halted.next(&late, &plan(), 350).expect("seen");
        assert!(log.is_empty(), "{log:?}");
        assert!(absorbed.next(&late, &plan(), 360).is_none());
        // New files do: generation 2.
        let fixed = [node("ns1", "a1", Some("c1")), node("ns2", "a2", Some("b2"))];
        let (again, _) = halted.next(&fixed, &plan(), 400).expect("begun");
        assert_eq!(again.rollout.candidate, 2);
        assert_eq!(again.allowed("ns1"), Some("c1"));
    }

    /// The race of a deployment: ns2 reports its new files first, the generation begins with
    /// the canary unchanged; the canary's own files (refused by its taster) arrive during the
    /// bake. The generation halts, and the next one begins with the canary's files.
    #[test]
    fn files_reaching_the_canary_after_its_release_halt_and_begin_the_next_generation() {
        let settled = BundleRecord::settled(&[node("ns1", "a1", None), node("ns2", "a2", None)], 0);
        let early = [node("ns1", "a1", None), node("ns2", "a2", Some("b2"))];
        let (begun, _) = settled.next(&early, &plan(), 100).expect("begun");
        assert_eq!(begun.allowed("ns1"), Some("a1"));
        let mut refusing = node("ns1", "a1", None);
        if let Some(b) = refusing.bundle.as_mut() {
            b.refused = Some(("b1".into(), "taster killed by signal 6".into()));
        }
        let late = [refusing, node("ns2", "a2", Some("b2"))];
        let (halted, log) = begun.next(&late, &plan(), 500).expect("halted");
        assert!(
            log[0].contains("its files changed during the rollout"),
            "{log:?}"
        );
        assert_eq!(halted.allowed("ns2"), Some("a2"));
        let (next, _) = halted.next(&late, &plan(), 600).expect("next generation");
        assert_eq!(next.rollout.candidate, 2);
        let (halted_again, log) = next.next(&late, &plan(), 700).expect("halted");
        assert!(
            log[0].contains("bundle b1: taster killed by signal 6"),
            "{log:?}"
        );
        assert_eq!(halted_again.allowed("ns2"), Some("a2"));
        assert!(halted_again.next(&late, &plan(), 800).is_none());
    }

    #[test]
    fn a_canary_that_served_the_bundle_goes_back_to_its_last_known_good() {
        let settled = BundleRecord::settled(&[node("ns1", "a1", None), node("ns2", "a2", None)], 0);
        let staged = [node("ns1", "a1", Some("b1")), node("ns2", "a2", None)];
        let (begun, _) = settled.next(&staged, &plan(), 100).expect("begun");
        let mut failing = node("ns1", "b1", None);
        if let Some(report) = failing.rollout.as_mut() {
            report.probes = Some((
                0,
                vec![crate::rollout::ProbeResult {
                    probe: "critical.example.com A".into(),
                    ok: false,
                    detail: "NXDOMAIN".into(),
                }],
            ));
        }
        let mut probing = begun.clone();
        probing.rollout.probes = vec!["critical.example.com A".into()];
        let served = [failing, node("ns2", "a2", None)];
        let (halted, log) = probing.next(&served, &plan(), 200).expect("halted");
        assert!(
            log[0].contains("probe critical.example.com A: NXDOMAIN"),
            "{log:?}"
        );
        assert_eq!(halted.allowed("ns1"), Some("a1"));
        let back = [node("ns1", "a1", Some("b1")), node("ns2", "a2", None)];
        let (marked, _) = halted.next(&back, &plan(), 300).expect("marked");
        let state = marked.rollout.nodes.get("ns1").map(|p| p.state);
        assert_eq!(state, Some(crate::rollout::NodeState::RolledBack));
    }
}
