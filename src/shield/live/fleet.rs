//! The shield's tick in fleet mode. One node, the leader, runs the step on the fleet-wide
//! demand and the freshest feed and proposes the result for etcd; every node, the leader too,
//! serves only what was published (with its revision), so all nodes answer every client
//! subnet alike. A node cut off from etcd keeps the last published state (fail-static) and,
//! once it has had no contact for `revert_after_secs`, runs the step alone on inputs aged by
//! that time: exactly the decay of a stale feed, back to normal answers.
//!
//! Everything read from etcd (published state, feed, reports) is checked here against this
//! node's topology; a refusal is counted and shown, and never replaces what is served.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::{lock, Shield};
use crate::cells::{ImpairedCells, Why};
use crate::policy::{CompiledPolicies, ShedView, ShieldMode};
use crate::shield::feed::{parse_feed, FeedError};
use crate::shield::link::{Inbox, Outbox};
use crate::shield::source::FeedOrigin;
use crate::shield::step::ShieldState;
use crate::shield::step::{checked_step, shed_view, Demand, Inputs, Rings, ShieldSettings};
use crate::shield::wire::{self, FeedInfo, LoadRecord, NodeReport, PublishedState, WireCell};

/// A leader republishes an unchanged view this often, so that a successor starts from a state
/// (moves in flight, timers, estimates) at most this old.
const REPUBLISH: Duration = Duration::from_secs(1);
/// A published state not renewed for this many republish periods means the leader stopped
/// deciding (a hand-written leader key on a live lease, a leader whose shield thread stalls
/// while its etcd task keeps the lease): an alert, and after `revert_after_secs` the same
/// decay as lost etcd contact.
const STALE_PERIODS: u32 = 5;

/// What one fleet tick works with.
pub(in crate::shield) struct Tick<'a> {
    pub node: &'a str,
    pub policies: &'a CompiledPolicies,
    pub rings: &'a Rings,
    pub settings: &'a ShieldSettings,
    pub mode: ShieldMode,
    /// The load sources' names, for status.
    pub sources: Vec<String>,
    pub now: SystemTime,
}

/// How a node serves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Role {
    /// No published state yet (normal answers).
    #[default]
    Waiting,
    /// Leads: decides, and serves what it published.
    Leader,
    /// Serves the leader's published state.
    Published,
    /// etcd unreachable: serves the last published state unchanged.
    FailStatic,
    /// No contact with etcd for `revert_after_secs`: decays on its own to normal answers.
    Reverting,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Waiting => "waiting",
            Role::Leader => "leader",
            Role::Published => "published",
            Role::FailStatic => "fail-static",
            Role::Reverting => "reverting",
        }
    }
}

/// The state behind the served view.
struct Served {
    /// Its published revision (`None`: decided here, while cut off).
    revision: Option<i64>,
    leader: String,
    at_ms: u64,
    state: ShieldState,
    /// The cells its step found hot (the leader's, or this node's own while it reverts).
    hot_cells: Option<Arc<ImpairedCells>>,
}

/// Fleet bookkeeping of the shield's thread.
#[derive(Default)]
pub(super) struct Side {
    served: Option<Served>,
    /// Revisions of the published state and load record last read (accepted or refused).
    state_seen: Option<i64>,
    /// When a new published state was last accepted (the leader renews it every
    /// [`REPUBLISH`]).
    state_renewed: Option<Instant>,
    load_seen: Option<i64>,
    /// The feed slot's number of the last feed shared or read from etcd.
    feed_seen: u64,
    /// When the demand counters were last taken (for rates).
    last_take: Option<Instant>,
    /// The leader's last proposed view, with its hot cells, and when.
    proposed: Option<(ShedView, Vec<WireCell>, Instant)>,
    demand_from: Vec<String>,
    refused: u64,
    last_refusal: Option<String>,
}

/// What status shows of fleet mode's shield.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetShieldStatus {
    pub node: String,
    /// The node holding the leader key.
    pub leader: Option<String>,
    /// How this node serves: `leader`, `published`, `fail-static`, `reverting`, `waiting`.
    pub role: String,
    /// The published state revision served (`None` while waiting or reverting).
    pub revision: Option<i64>,
    /// Who computed the state served, and how long ago.
    pub published_by: Option<String>,
    pub state_age_secs: Option<f64>,
    /// Since etcd last answered.
    pub contact_age_secs: Option<f64>,
    /// Since a new published state last arrived (this node's clock; `None`: none yet, or
    /// this node leads).
    #[serde(default)]
    pub renewed_age_secs: Option<f64>,
    /// The published state was not renewed for several republish periods: the leader stopped
    /// deciding (this node decays after `revert_after_secs`, as without etcd).
    #[serde(default)]
    pub stale: bool,
    /// Leader only: the nodes whose demand the last step summed.
    pub demand_from: Vec<String>,
    /// Records from etcd refused (published states, reports), and the latest reason.
    pub refused: u64,
    pub last_refusal: Option<String>,
    /// Why the link to etcd is down, while it is.
    pub link_error: Option<String>,
    /// The cells left out for their load as served (`layer.cell`): the leader's step's,
    /// whatever this node's own step says.
    #[serde(default)]
    pub hot_cells: Vec<String>,
}

/// The published `names` of hot cells as this node's topology has them; an unknown cell
/// refuses the state (the leader runs another topology: a control change half rolled out).
fn hot_cells_of(
    names: &[WireCell],
    policies: &CompiledPolicies,
) -> Result<Option<Arc<ImpairedCells>>, String> {
    if names.is_empty() {
        return Ok(None);
    }
    let topology = policies
        .cells()
        .ok_or("hot_cells: this node's topology has no cells")?;
    let cells = names
        .iter()
        .map(|c| {
            policies
                .cell_named(&c.layer, &c.cell)
                .ok_or_else(|| format!("hot_cells: unknown cell {}.{}", c.layer, c.cell))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Some(Arc::new(ImpairedCells::because(
        topology,
        &cells,
        Why::Hot,
    ))))
}

/// `cells` by name, as the published state and status name them.
fn cell_names(cells: Option<&ImpairedCells>, policies: &CompiledPolicies) -> Vec<WireCell> {
    cells
        .map(|cells| {
            cells
                .cells()
                .iter()
                .filter_map(|&c| policies.cell_name(c))
                .map(|(layer, cell)| WireCell {
                    layer: layer.to_string(),
                    cell: cell.to_string(),
                })
                .collect()
        })
        .unwrap_or_default()
}

impl Shield {
    /// The cells this node's own step found hot, by name (what a leader publishes).
    fn own_hot_cell_names(&self, policies: &CompiledPolicies) -> Vec<WireCell> {
        cell_names(lock(&self.cells).hot.as_deref(), policies)
    }

    /// The cells served as hot, `layer.cell`, for status.
    fn served_hot_cell_names(&self, policies: &CompiledPolicies) -> Vec<String> {
        cell_names(lock(&self.cells).served().as_deref(), policies)
            .into_iter()
            .map(|c| format!("{}.{}", c.layer, c.cell))
            .collect()
    }
}

fn epoch_ms(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// How this node serves, from the age of its contact with etcd and of the published state it
/// serves (`renewed_ms`: since a new one arrived; a leader that stopped publishing decays the
/// followers as lost contact does).
fn role_of(
    inbox: &Inbox,
    contact_ms: Option<u64>,
    renewed_ms: Option<u64>,
    settings: &ShieldSettings,
    served: bool,
) -> Role {
    match contact_ms {
        None => Role::Waiting,
        Some(age) if age >= settings.revert_after_ms => Role::Reverting,
        Some(_)
            if !inbox.leading
                && inbox.error.is_none()
                && renewed_ms.is_some_and(|age| age >= settings.revert_after_ms) =>
        {
            Role::Reverting
        }
        Some(_) if inbox.error.is_some() => {
            if served {
                Role::FailStatic
            } else {
                Role::Waiting
            }
        }
        Some(_) if inbox.leading => Role::Leader,
        Some(_) if served => Role::Published,
        Some(_) => Role::Waiting,
    }
}

/// Makes every reading at least `age_ms` old (what a node cut off from etcd knows of them).
fn age_readings(inputs: &mut Inputs, age_ms: u64) {
    for reading in inputs
        .regions
        .iter_mut()
        .chain(inputs.sites.iter_mut())
        .flatten()
    {
        reading.age_ms = reading.age_ms.max(age_ms);
    }
}

impl Side {
    /// Counts a refused record; a refusal repeated tick after tick counts once.
    fn refuse(&mut self, reason: String) {
        if self.last_refusal.as_ref() != Some(&reason) {
            tracing::warn!(reason = ?reason, "shield: record from etcd refused");
            self.refused += 1;
            self.last_refusal = Some(reason);
        }
    }
}

impl Shield {
    pub(super) fn fleet_tick(&self, tick: Tick<'_>, own_demand: Vec<Demand>) {
        let now_ms = epoch_ms(tick.now);
        let clock = Instant::now();
        let inbox = self.fleet.inbox();
        let mut side = lock(&self.fleet_side);
        let mut outbox = Outbox {
            load: self.feed_to_share(&mut side, &tick),
            ..Outbox::default()
        };
        self.read_load(&mut side, &inbox, &tick);
        self.read_published(&mut side, &inbox, &tick, now_ms);
        let contact_ms = inbox
            .contact
            .map(|c| clock.saturating_duration_since(c).as_millis() as u64);
        let renewed_ms = side
            .state_renewed
            .filter(|_| !inbox.leading)
            .map(|at| clock.saturating_duration_since(at).as_millis() as u64);
        let role = role_of(
            &inbox,
            contact_ms,
            renewed_ms,
            tick.settings,
            side.served.is_some(),
        );
        // Alerted on no later than it decays.
        let stale_after_ms =
            ((REPUBLISH * STALE_PERIODS).as_millis() as u64).min(tick.settings.revert_after_ms);
        let stale = renewed_ms.is_some_and(|age| age >= stale_after_ms);
        if role != Role::Leader {
            side.proposed = None;
        }
        // The cells served: the leader's while this node serves its published state, else
        // this node's own (it leads, decays alone, or has seen no state yet).
        lock(&self.cells).published = match role {
            Role::Published | Role::FailStatic => {
                Some(side.served.as_ref().and_then(|s| s.hot_cells.clone()))
            }
            Role::Leader | Role::Reverting | Role::Waiting => None,
        };
        let (inputs, changes, repairs) = match role {
            Role::Leader => {
                let demand = self.fleet_demand(&mut side, &inbox, &tick, now_ms);
                let inputs = self.inputs(tick.policies, tick.mode, demand, tick.now);
                let (next, changes, repairs) = {
                    let previous = lock(&self.state);
                    checked_step(&previous, &inputs, tick.rings, tick.settings, now_ms)
                };
                outbox.state = self.proposal(&mut side, &tick, &next, now_ms, clock);
                *lock(&self.state) = next;
                (inputs, changes, repairs)
            }
            Role::Reverting => {
                let mut inputs = self.inputs(tick.policies, tick.mode, Vec::new(), tick.now);
                let cut_off = contact_ms.unwrap_or(u64::MAX).max(renewed_ms.unwrap_or(0));
                age_readings(&mut inputs, cut_off);
                let (next, changes, repairs) = {
                    let previous = lock(&self.state);
                    checked_step(&previous, &inputs, tick.rings, tick.settings, now_ms)
                };
                self.publish(shed_view(&next, tick.settings));
                side.served = Some(Served {
                    revision: None,
                    leader: tick.node.to_string(),
                    at_ms: now_ms,
                    state: next.clone(),
                    hot_cells: lock(&self.cells).hot.clone(),
                });
                *lock(&self.state) = next;
                (inputs, changes, repairs)
            }
            _ => (
                self.inputs(tick.policies, tick.mode, Vec::new(), tick.now),
                Vec::new(),
                Vec::new(),
            ),
        };
        outbox.report = self.report(&mut side, &tick, role, own_demand, now_ms, clock);
        self.fleet.send(outbox);

        let mut status = lock(&self.status);
        let region_names: Vec<&str> = tick.policies.region_names().collect();
        self.log_outcome(&mut status, &changes, &repairs, &region_names, tick.now);
        status.sources = tick.sources;
        let shown = side
            .served
            .as_ref()
            .map_or_else(ShieldState::default, |s| s.state.clone());
        self.fill_status(
            &mut status,
            &shown,
            &inputs,
            tick.policies,
            tick.settings,
            tick.now,
        );
        let fleet = FleetShieldStatus {
            node: tick.node.to_string(),
            leader: inbox.leader.clone(),
            role: role.name().to_string(),
            revision: side.served.as_ref().and_then(|s| s.revision),
            published_by: side.served.as_ref().map(|s| s.leader.clone()),
            state_age_secs: side
                .served
                .as_ref()
                .map(|s| now_ms.saturating_sub(s.at_ms) as f64 / 1000.0),
            contact_age_secs: contact_ms.map(|ms| ms as f64 / 1000.0),
            renewed_age_secs: renewed_ms.map(|ms| ms as f64 / 1000.0),
            stale,
            demand_from: side.demand_from.clone(),
            refused: side.refused,
            last_refusal: side.last_refusal.clone(),
            link_error: inbox.error.clone(),
            hot_cells: self.served_hot_cell_names(tick.policies),
        };
        match role {
            Role::FailStatic => status.alerts.push(format!(
                "fleet shield: etcd unreachable; serving the last published state (revision {}) unchanged",
                fleet.revision.unwrap_or(0)
            )),
            Role::Reverting if inbox.error.is_none() && stale => status.alerts.push(format!(
                "fleet shield: the leader ({}) has not renewed the published state for {:.0} s: decaying to normal answers",
                fleet.leader.as_deref().unwrap_or("?"),
                fleet.renewed_age_secs.unwrap_or(0.0)
            )),
            Role::Reverting => status.alerts.push(format!(
                "fleet shield: no contact with etcd for {:.0} s: decaying to normal answers",
                fleet.contact_age_secs.unwrap_or(0.0)
            )),
            _ if stale => status.alerts.push(format!(
                "fleet shield: the leader ({}) has not renewed the published state for {:.0} s (it renews every {} s); serving revision {} until revert_after_secs, then decaying",
                fleet.leader.as_deref().unwrap_or("?"),
                fleet.renewed_age_secs.unwrap_or(0.0),
                REPUBLISH.as_secs(),
                fleet.revision.unwrap_or(0)
            )),
            _ => {}
        }
        status.fleet = Some(fleet);
        // Counted last: a reader that sees N ticks sees the state and status of the N-th.
        status.ticks += 1;
    }

    /// A feed received here (pushed, from the load file or from Prometheus), for etcd.
    fn feed_to_share(&self, side: &mut Side, tick: &Tick<'_>) -> Option<Vec<u8>> {
        let (number, latest) = self.feed.latest_numbered();
        if number == side.feed_seen {
            return None;
        }
        side.feed_seen = number;
        let (feed, received, origin) = latest?;
        if matches!(origin, FeedOrigin::Fleet(_)) {
            return None;
        }
        let record = LoadRecord {
            node: tick.node.to_string(),
            origin: origin.to_string(),
            received_ms: epoch_ms(received),
            feed: feed.to_json(),
        };
        serde_json::to_vec(&record).ok()
    }

    /// The fleet's freshest feed, checked like any feed, into the feed slot.
    fn read_load(&self, side: &mut Side, inbox: &Inbox, tick: &Tick<'_>) {
        let Some(stored) = &inbox.load else { return };
        if side.load_seen == Some(stored.revision) {
            return;
        }
        side.load_seen = Some(stored.revision);
        let record: LoadRecord = match wire::decode(&stored.bytes) {
            Ok(record) => record,
            Err(e) => {
                let error = FeedError::Unreadable {
                    what: format!("the fleet's load record (revision {})", stored.revision),
                    reason: e.to_string(),
                };
                self.feed
                    .refuse(FeedOrigin::Fleet("etcd".into()), &error, tick.now);
                return;
            }
        };
        let known = super::KnownNames::of(tick.policies);
        let received = (UNIX_EPOCH + Duration::from_millis(record.received_ms)).min(tick.now);
        let origin = FeedOrigin::Fleet(format!("{} ({})", record.node, record.origin));
        let checked = parse_feed(record.feed.as_bytes(), &known.names(), tick.now);
        let _ = self.feed.offer_checked(checked, origin, received);
        // Read from etcd: not to be shared back.
        side.feed_seen = self.feed.latest_numbered().0;
    }

    /// The newest published state, checked whole, becomes what this node serves.
    fn read_published(&self, side: &mut Side, inbox: &Inbox, tick: &Tick<'_>, now_ms: u64) {
        let Some(stored) = &inbox.state else { return };
        if side.state_seen == Some(stored.revision) {
            return;
        }
        side.state_seen = Some(stored.revision);
        let read = wire::read_published(
            &stored.bytes,
            tick.rings,
            wire::Clock::new(now_ms, tick.settings),
        )
        .map_err(|e| e.to_string())
        .and_then(|(published, state)| {
            let hot = hot_cells_of(&published.hot_cells, tick.policies)?;
            Ok((published, state, hot))
        });
        match read {
            Err(e) => {
                let serving = side
                    .served
                    .as_ref()
                    .and_then(|s| s.revision)
                    .map_or("normal answers".to_string(), |r| format!("revision {r}"));
                side.refuse(format!(
                    "published state (revision {}): {e}; still serving {serving}",
                    stored.revision
                ))
            }
            Ok((published, state, hot)) => {
                // The leader steps on from its own newest state and serves its own cells;
                // everyone else (and a leader taking over) from what was published.
                let follows = !(published.leader == tick.node && inbox.leading);
                if follows {
                    lock(&self.cells).published = Some(hot.clone());
                }
                let view = shed_view(&state, tick.settings).with_revision(stored.revision);
                self.publish(view);
                if follows {
                    *lock(&self.state) = state.clone();
                }
                side.served = Some(Served {
                    revision: Some(stored.revision),
                    leader: published.leader,
                    at_ms: published.at_ms,
                    state,
                    hot_cells: hot,
                });
                side.state_renewed = Some(Instant::now());
            }
        }
    }

    /// The leader's demand input: the sum of every fresh node report.
    fn fleet_demand(
        &self,
        side: &mut Side,
        inbox: &Inbox,
        tick: &Tick<'_>,
        now_ms: u64,
    ) -> Vec<Demand> {
        let mut sum = vec![Demand::default(); tick.rings.regions.len()];
        let mut from = Vec::new();
        for (name, bytes) in &inbox.reports {
            let clock = wire::Clock::new(now_ms, tick.settings);
            let (report, demand) = match wire::read_report(bytes, tick.rings, clock) {
                Ok(read) => read,
                Err(e) => {
                    side.refuse(format!(
                        "report of node {name}: {e}; its demand is left out"
                    ));
                    continue;
                }
            };
            if &report.node != name {
                side.refuse(format!(
                    "report under node {name} is signed {:?}; left out",
                    report.node
                ));
                continue;
            }
            if now_ms.saturating_sub(report.at_ms) > tick.settings.stale_after_ms {
                continue;
            }
            for (total, d) in sum.iter_mut().zip(demand) {
                total.kept += d.kept;
                for (to, v) in d.sent {
                    *total.sent.entry(to).or_insert(0.0) += v;
                }
            }
            from.push(name.clone());
        }
        side.demand_from = from;
        sum
    }

    /// The leader's next state for etcd, when its view changed or the last is [`REPUBLISH`]
    /// old.
    fn proposal(
        &self,
        side: &mut Side,
        tick: &Tick<'_>,
        next: &ShieldState,
        now_ms: u64,
        clock: Instant,
    ) -> Option<Vec<u8>> {
        let view = shed_view(next, tick.settings);
        let hot_cells = self.own_hot_cell_names(tick.policies);
        let due = side.proposed.as_ref().is_none_or(|(last, cells, at)| {
            *last != view
                || *cells != hot_cells
                || clock.saturating_duration_since(*at) >= REPUBLISH
        });
        if !due {
            return None;
        }
        let feed = self.feed.latest().map(|(feed, received, origin)| FeedInfo {
            measured_ms: epoch_ms(feed.time),
            received_ms: epoch_ms(received),
            origin: origin.to_string(),
        });
        let published = PublishedState {
            leader: tick.node.to_string(),
            at_ms: now_ms,
            feed,
            demand_from: side.demand_from.clone(),
            state: wire::encode_state(next, tick.rings),
            hot_cells: hot_cells.clone(),
        };
        let bytes = serde_json::to_vec(&published).ok()?;
        side.proposed = Some((view, hot_cells, clock));
        Some(bytes)
    }

    /// This node's report: its demand since the last tick as clients holding each kind of
    /// answer (TTL-weighted answers per second), and what it serves.
    fn report(
        &self,
        side: &mut Side,
        tick: &Tick<'_>,
        role: Role,
        own_demand: Vec<Demand>,
        now_ms: u64,
        clock: Instant,
    ) -> Option<Vec<u8>> {
        let elapsed = side
            .last_take
            .map_or(1.0, |at| clock.saturating_duration_since(at).as_secs_f64())
            .max(0.001);
        side.last_take = Some(clock);
        let rates: Vec<Demand> = own_demand
            .into_iter()
            .map(|d| Demand {
                kept: d.kept / elapsed,
                sent: d
                    .sent
                    .into_iter()
                    .map(|(to, v)| (to, v / elapsed))
                    .collect(),
            })
            .collect();
        let feed_age_ms = self.feed.latest().map(|(feed, received, _)| {
            super::feed_age(feed.time, received, tick.now).as_millis() as u64
        });
        let report = NodeReport {
            node: tick.node.to_string(),
            at_ms: now_ms,
            demand: wire::encode_demand(&rates, tick.rings),
            serving: side.served.as_ref().and_then(|s| s.revision),
            role: role.name().to_string(),
            feed_age_ms,
        };
        serde_json::to_vec(&report).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_serves_published_then_fail_static_then_decays() {
        let settings = ShieldSettings {
            revert_after_ms: 4000,
            ..ShieldSettings::default()
        };
        let linked = Inbox::default();
        let leading = Inbox {
            leading: true,
            ..Inbox::default()
        };
        let broken = Inbox {
            leading: true,
            error: Some("etcd: connection refused".into()),
            ..Inbox::default()
        };
        assert_eq!(
            role_of(&linked, None, None, &settings, false),
            Role::Waiting
        );
        assert_eq!(
            role_of(&linked, Some(50), None, &settings, false),
            Role::Waiting
        );
        assert_eq!(
            role_of(&linked, Some(50), None, &settings, true),
            Role::Published
        );
        assert_eq!(
            role_of(&leading, Some(50), None, &settings, true),
            Role::Leader
        );
        // A leader that stopped renewing the state: followers decay as without etcd; the
        // leader itself is judged by its own contact only.
        assert_eq!(
            role_of(&linked, Some(50), Some(3999), &settings, true),
            Role::Published
        );
        assert_eq!(
            role_of(&linked, Some(50), Some(4000), &settings, true),
            Role::Reverting
        );
        assert_eq!(
            role_of(&leading, Some(50), Some(9000), &settings, true),
            Role::Leader
        );
        // A leader whose link broke leads no more, whatever the inbox last said.
        assert_eq!(
            role_of(&broken, Some(1500), None, &settings, true),
            Role::FailStatic
        );
        assert_eq!(
            role_of(&broken, Some(3999), None, &settings, true),
            Role::FailStatic
        );
        assert_eq!(
            role_of(&broken, Some(4000), None, &settings, true),
            Role::Reverting
        );
        assert_eq!(
            role_of(&broken, Some(1500), None, &settings, false),
            Role::Waiting
        );
    }

    #[test]
    fn readings_age_with_the_lost_contact_but_never_grow_younger() {
        let reading = |age_ms| {
            Some(crate::shield::step::Reading {
                load: 1.0,
                capacity: 2.0,
                age_ms,
            })
        };
        let mut inputs = Inputs {
            regions: vec![reading(100), None, reading(9000)],
            sites: vec![reading(10)],
            ..Inputs::default()
        };
        age_readings(&mut inputs, 5000);
        let ages: Vec<Option<u64>> = inputs
            .regions
            .iter()
            .chain(&inputs.sites)
            .map(|r| r.map(|r| r.age_ms))
            .collect();
        assert_eq!(ages, vec![Some(5000), None, Some(9000), Some(5000)]);
    }
}
