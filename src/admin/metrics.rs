//! `GET /metrics`: gathers the counters and the control plane's and shield's state into plain
//! numbers (locks and allocation are fine here: this is the scrape, not the serving path), and
//! encodes them in the Prometheus text format with `prometheus-client`.
//!
//! Lives with the admin endpoint, above everything it reads: [`crate::metrics`] holds only the
//! counters the serving path bumps, and imports nothing of the control plane.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::fleet::origin::FleetOrigin;
use crate::metrics::per_snapshot::{self, Series};
use crate::metrics::serving::{serving, ConnectionEvent, ServingTotals, RCODES, TRANSPORTS};
use crate::metrics::supervisor::{SupervisorStatus, SupervisorView};
use crate::policy::{ProfileId, ProfileKindTag};
use crate::reload::{Reloader, Status};
use crate::shield::live::ShieldStatus;
use crate::shield::source::FeedStats;

/// The `Content-Type` of what [`render`] returns.
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Everything one scrape reports, read once so the numbers agree with each other.
#[derive(Debug)]
pub struct Scrape {
    serving: ServingTotals,
    series: BTreeMap<Series, u64>,
    status: Status,
    shield: ShieldStatus,
    feed_age_secs: Option<f64>,
    feeds: FeedStats,
    /// (profile, endpoint, weight if the profile is weighted, enabled).
    endpoints: Vec<(String, String, Option<u32>, bool)>,
    /// Fleet mode: the link to etcd.
    fleet: Option<crate::fleet::status::FleetLinkStatus>,
    xdp: Option<crate::metrics::xdp::XdpView>,
    encrypted: Option<crate::metrics::encrypted::EncryptedView>,
    /// Endpoint monitors (targets and monitored endpoints).
    health: Option<crate::health::HealthReport>,
    /// Zones to sign left out for their keys.
    dnssec_not_served: Vec<String>,
    /// The admin endpoint's connections and the listeners' descriptor budget.
    admin: super::connections::AdminConnectionsView,
    descriptors: crate::descriptors::DescriptorStatus,
    /// Safety rules: refusals and overrides by rule.
    safety: crate::safety::tally::SafetyStatus,
    /// Practice drills: runs, last measured times, alerts.
    drills: crate::drill::log::DrillStatus,
    /// Secondary zones: serial, expired, transfers in.
    secondary: BTreeMap<String, crate::secondary::ZoneStatus>,
    /// Zone transfers out: per zone (serial, journal depth, NOTIFY targets) and the counts.
    transfer: Option<BTreeMap<String, super::transfer::ZoneTransferView>>,
    transfer_counts: crate::metrics::transfer::TransferReport,
    /// The daemon's supervised threads and tasks.
    supervisor: SupervisorView,
    /// Tenants: served by state, refused, changes applied.
    tenants: crate::reload::tenants::TenantsStatus,
    /// Cells left out of tenants' answers and the blame for them.
    cells: Option<super::cells::CellsView>,
    /// Per-tenant response budgets (`None`: off).
    budgets: Option<crate::rrl::budget::BudgetStatus>,
}

/// Reads the state to report; `fleet` is the node's fleet origin (`None`: single node).
pub fn gather(
    reloader: &Reloader,
    fleet: Option<&FleetOrigin>,
    supervisor: &SupervisorStatus,
) -> Scrape {
    let (snapshot, status) = reloader.snapshot_and_status();
    let shield = reloader.shield();
    let now = SystemTime::now();
    let feed_age_secs = shield.feed.latest().map(|(feed, _, _)| {
        now.duration_since(feed.time)
            .unwrap_or(Duration::ZERO)
            .as_secs_f64()
    });
    let mut endpoints = Vec::new();
    if let Some(policies) = snapshot.policies() {
        for (i, (profile, states)) in policies.endpoint_states().into_iter().enumerate() {
            let weighted = u16::try_from(i)
                .ok()
                .and_then(|id| policies.profile_kind(ProfileId(id)))
                == Some(ProfileKindTag::Weighted);
            for (endpoint, weight, enabled) in states {
                let weight = weighted.then_some(weight);
                endpoints.push((profile.clone(), endpoint, weight, enabled));
            }
        }
    }
    Scrape {
        serving: serving().totals(),
        series: per_snapshot::totals(),
        status,
        shield: shield.status(),
        feed_age_secs,
        feeds: shield.feed.stats(),
        endpoints,
        fleet: fleet.map(FleetOrigin::link),
        xdp: crate::metrics::xdp::view(),
        encrypted: crate::metrics::encrypted::view(snapshot.tls()),
        health: reloader.health().report(snapshot.policies()),
        dnssec_not_served: snapshot
            .dnssec_not_served()
            .iter()
            .map(|n| n.zone.clone())
            .collect(),
        tenants: reloader.tenants().status(),
        cells: super::cells::view(
            snapshot.policies(),
            &super::cells::LiveCells::of(&snapshot),
            reloader.tenants(),
        ),
        budgets: super::budget_status(&snapshot),
        admin: super::connections::view(),
        descriptors: crate::descriptors::status(),
        safety: crate::safety::tally::status(),
        drills: crate::drill::log::status(),
        secondary: crate::secondary::status().snapshot(),
        transfer: super::transfer::view(&snapshot),
        transfer_counts: crate::metrics::transfer::transfer_status().report(),
        supervisor: supervisor.view(),
    }
}

/// The Prometheus text exposition of the server's state.
pub fn render(
    reloader: &Reloader,
    fleet: Option<&FleetOrigin>,
    supervisor: &SupervisorStatus,
) -> Result<String, fmt::Error> {
    encode(gather(reloader, fleet, supervisor))
}

/// Encodes a scrape (separate from [`gather`] so tests can encode made-up numbers).
pub fn encode(scrape: Scrape) -> Result<String, fmt::Error> {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(scrape));
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
    Ok(text)
}

type Labels = Vec<(&'static str, String)>;

/// Per target: up, checks, failures, last latency, last change; per monitored endpoint:
/// whether health lets it be served.
fn encode_health(
    encoder: &mut DescriptorEncoder,
    health: &crate::health::HealthReport,
) -> fmt::Result {
    let target = |t: &crate::health::TargetStatus| vec![("target", t.target.clone())];
    gauge(
        encoder,
        "steerdns_health_lookups_in_flight",
        "Name lookups of probe targets in flight (at most 4; all 4 for long: the system \
         resolver hangs, and probes of other names fail at once).",
        health.lookups_in_flight as f64,
    )?;
    gauges(
        encoder,
        "steerdns_health_target_up",
        "1 if the monitored target is up or unknown (served), 0 if down.",
        health
            .targets
            .iter()
            .map(|t| (target(t), bool_value(t.state != "down"))),
    )?;
    gauges(
        encoder,
        "steerdns_health_target_unknown",
        "1 while the target has no check result yet (startup = \"unknown\", served as up).",
        health
            .targets
            .iter()
            .map(|t| (target(t), bool_value(t.state == "unknown"))),
    )?;
    counters(
        encoder,
        "steerdns_health_checks",
        "Checks of the target.",
        health.targets.iter().map(|t| (target(t), t.checks)),
    )?;
    counters(
        encoder,
        "steerdns_health_check_failures",
        "Checks of the target that failed (error, bad status or body, timeout).",
        health.targets.iter().map(|t| (target(t), t.failures)),
    )?;
    gauges(
        encoder,
        "steerdns_health_last_check_seconds",
        "How long the target's last check took.",
        health
            .targets
            .iter()
            .filter_map(|t| t.last_latency_ms.map(|ms| (target(t), ms / 1000.0))),
    )?;
    gauges(
        encoder,
        "steerdns_health_last_change_timestamp_seconds",
        "When the target last changed state (Unix time).",
        health.targets.iter().filter_map(|t| {
            let at = crate::rfc3339::parse(t.last_change.as_deref()?).ok()?;
            let secs = at
                .duration_since(SystemTime::UNIX_EPOCH)
                .ok()?
                .as_secs_f64();
            Some((target(t), secs))
        }),
    )?;
    gauges(
        encoder,
        "steerdns_endpoint_healthy",
        "1 if health lets the monitored endpoint be served (up, unknown or forced up), 0 if it is skipped.",
        health.endpoints.iter().map(|e| {
            let labels = vec![
                ("profile", e.profile.clone()),
                ("endpoint", e.endpoint.clone()),
                ("target", e.target.clone()),
            ];
            (labels, bool_value(e.served))
        }),
    )?;
    if let Some(sharing) = &health.sharing {
        encode_sharing(encoder, health, sharing)?;
    }
    Ok(())
}

/// Shared probing: the etcd link, the live probers, and per target who probes it and what
/// each prober says.
fn encode_sharing(
    encoder: &mut DescriptorEncoder,
    health: &crate::health::HealthReport,
    sharing: &crate::health::SharingStatus,
) -> fmt::Result {
    gauge(
        encoder,
        "steerdns_health_sharing_connected",
        "1 while probe results are shared through etcd, 0 while etcd is unreachable.",
        bool_value(sharing.connected),
    )?;
    gauge(
        encoder,
        "steerdns_health_sharing_fail_static",
        "1 while etcd is unreachable and the last shared health view is served unchanged.",
        bool_value(sharing.fail_static),
    )?;
    gauge(
        encoder,
        "steerdns_health_sharing_probers",
        "Live probers of the fleet (nodes with a valid record in etcd).",
        sharing.probers.len() as f64,
    )?;
    gauge(
        encoder,
        "steerdns_health_sharing_refused_records",
        "Prober records in etcd refused as bad (their nodes do not count).",
        sharing.refused.len() as f64,
    )?;
    let shared = || {
        health
            .targets
            .iter()
            .filter_map(|t| Some((t, t.shared.as_ref()?)))
    };
    let target = |t: &crate::health::TargetStatus| vec![("target", t.target.clone())];
    gauges(
        encoder,
        "steerdns_health_probed_here",
        "1 if this node is one of the target's probers.",
        shared().map(|(t, s)| (target(t), bool_value(s.probed_here))),
    )?;
    gauges(
        encoder,
        "steerdns_health_reporting_probers",
        "The target's probers with a fresh up/down result.",
        shared().map(|(t, s)| (target(t), s.reporting as f64)),
    )?;
    gauges(
        encoder,
        "steerdns_health_down_votes",
        "The target's probers saying down (it is down at a strict majority of the reporting ones).",
        shared().map(|(t, s)| (target(t), s.down_votes as f64)),
    )?;
    gauges(
        encoder,
        "steerdns_health_prober_vote",
        "1 per assigned prober of the target, labelled with what it says (up, down, unknown, stale, missing).",
        shared().flat_map(|(t, s)| {
            s.probers.iter().map(move |p| {
                let labels = vec![
                    ("target", t.target.clone()),
                    ("node", p.node.clone()),
                    ("vote", p.vote.as_str().to_owned()),
                ];
                (labels, 1.0)
            })
        }),
    )
}

fn family<M: EncodeMetric>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    kind: MetricType,
    rows: impl IntoIterator<Item = (Labels, M)>,
) -> fmt::Result {
    let mut metric = encoder.encode_descriptor(name, help, None, kind)?;
    for (labels, value) in rows {
        value.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

fn counters(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, u64)>,
) -> fmt::Result {
    let rows = rows.into_iter().map(|(l, v)| (l, ConstCounter::new(v)));
    family(encoder, name, help, MetricType::Counter, rows)
}

fn gauges(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (Labels, f64)>,
) -> fmt::Result {
    let rows = rows.into_iter().map(|(l, v)| (l, ConstGauge::new(v)));
    family(encoder, name, help, MetricType::Gauge, rows)
}

fn gauge(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: f64) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(value).encode(metric)
}

fn counter(encoder: &mut DescriptorEncoder, name: &str, help: &str, value: u64) -> fmt::Result {
    let metric = encoder.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(value).encode(metric)
}

fn by_transport(values: &[u64; TRANSPORTS.len()]) -> impl Iterator<Item = (Labels, u64)> + '_ {
    TRANSPORTS
        .iter()
        .zip(values)
        .map(|(t, v)| (vec![("transport", t.to_string())], *v))
}

fn bool_value(b: bool) -> f64 {
    if b {
        1.0
    } else {
        0.0
    }
}

impl Scrape {
    fn encode_serving(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let s = &self.serving;
        counters(
            encoder,
            "steerdns_queries",
            "DNS queries received, by transport.",
            by_transport(&s.queries),
        )?;
        let responses = TRANSPORTS.iter().enumerate().flat_map(|(t, transport)| {
            RCODES.iter().enumerate().map(move |(r, rcode)| {
                let labels = vec![
                    ("transport", transport.to_string()),
                    ("rcode", rcode.to_string()),
                ];
                (labels, s.responses[t][r])
            })
        });
        counters(
            encoder,
            "steerdns_responses",
            "DNS responses sent, by transport and rcode.",
            responses,
        )?;
        counters(
            encoder,
            "steerdns_truncated_responses",
            "Responses sent with TC set (too large for the client's UDP payload).",
            by_transport(&s.truncated),
        )?;
        counters(
            encoder,
            "steerdns_dropped_queries",
            "Queries not answered at all (unparseable, or a response is not allowed).",
            by_transport(&s.dropped),
        )?;
        counter(
            encoder,
            "steerdns_udp_send_errors",
            "UDP responses the kernel refused to send.",
            s.udp_send_errors,
        )?;
        counter(
            encoder,
            "steerdns_tcp_connections",
            "TCP connections accepted.",
            s.tcp_accepted,
        )?;
        gauge(
            encoder,
            "steerdns_tcp_connections_open",
            "TCP connections open now.",
            s.tcp_open as f64,
        )?;
        counter(
            encoder,
            "steerdns_tcp_refused_per_client",
            "TCP connections closed at once: the client already had [server.tcp] \
             max_connections_per_client open.",
            s.tcp_events[ConnectionEvent::RefusedPerClient.index()],
        )?;
        counter(
            encoder,
            "steerdns_tcp_frame_timeouts",
            "TCP connections closed because a started query was not completed within \
             [server.tcp] frame_timeout_secs.",
            s.tcp_events[ConnectionEvent::FrameTimeout.index()],
        )?;
        counter(
            encoder,
            "steerdns_tcp_closed_idle_to_make_room",
            "Idle TCP connections closed early because the slots were filling up (past half \
             of [server.tcp] max_connections the idle time allowed shrinks toward \
             busy_idle_timeout_ms; a newcomer to full slots closes the one idle longest).",
            s.tcp_events[ConnectionEvent::Reaped.index()],
        )?;
        counter(
            encoder,
            "steerdns_tcp_closed_at_lifetime",
            "TCP connections closed at [server.tcp] max_connection_lifetime_secs.",
            s.tcp_events[ConnectionEvent::Lifetime.index()],
        )?;
        counters(
            encoder,
            "steerdns_tcp_connections_closed",
            "TCP connections the server closed, by reason: refused_per_client (over the \
             client prefix's share), refused_full (every slot taken, no holder could be taken \
             back), frame_timeout, idle_timeout, closed_idle_to_make_room, \
             closed_stalled_to_make_room (the worst holder of a full table: mid-query or \
             completing few queries for its time), closed_at_lifetime.",
            ConnectionEvent::TCP.iter().map(|e| {
                (
                    vec![("reason", e.label().to_string())],
                    s.tcp_events[e.index()],
                )
            }),
        )?;
        counter(
            encoder,
            "steerdns_tcp_accept_errors",
            "TCP accept() failures (e.g. out of file descriptors); UDP keeps serving.",
            s.tcp_accept_errors,
        )?;
        self.encode_encrypted(encoder)?;
        self.encode_rrl(encoder)
    }

    fn encode_encrypted(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let Some(view) = &self.encrypted else {
            return Ok(());
        };
        let by = |value: fn(&crate::metrics::encrypted::TransportView) -> u64| {
            view.transports
                .iter()
                .map(move |t| (vec![("transport", t.transport.clone())], value(t)))
        };
        counters(
            encoder,
            "steerdns_encrypted_connections",
            "Connections accepted by the encrypted transports ([server.tls]), by transport \
             (tls = DoT, https = DoH, quic = DoQ).",
            by(|t| t.connections_accepted),
        )?;
        gauges(
            encoder,
            "steerdns_encrypted_connections_open",
            "Connections of the encrypted transports open now (handshaking or serving).",
            view.transports.iter().map(|t| {
                (
                    vec![("transport", t.transport.clone())],
                    t.connections_open as f64,
                )
            }),
        )?;
        let events = view.transports.iter().flat_map(|t| {
            [
                ("refused_per_client", t.refused_per_client),
                ("handshake_failed", t.handshake_failed),
                ("handshake_timeout", t.handshake_timeout),
                ("frame_timeout", t.frame_timeout),
                ("bad_request", t.bad_request),
                ("refused_full", t.refused_full),
                ("idle_timeout", t.idle_timeout),
                ("closed_idle_to_make_room", t.closed_idle_to_make_room),
                ("closed_stalled_to_make_room", t.closed_stalled_to_make_room),
                ("closed_at_lifetime", t.closed_at_lifetime),
            ]
            .map(|(event, n)| {
                let labels = vec![
                    ("transport", t.transport.clone()),
                    ("event", event.to_string()),
                ];
                (labels, n)
            })
        });
        counters(
            encoder,
            "steerdns_encrypted_connection_events",
            "Encrypted connections or requests turned away: over the per-client share, every \
             slot taken with no holder to take back, failed or timed-out handshakes, queries \
             not completed in time, DoH requests that carry no DNS query, idle timeouts, \
             connections closed to make room while idle or stalled (mid-query, or completing \
             few queries for their time), connections closed at their lifetime.",
            events,
        )?;
        if let Some(cert) = &view.certificate {
            gauge(
                encoder,
                "steerdns_tls_certificate_expiry_timestamp_seconds",
                "notAfter of the [server.tls] certificate in service, Unix seconds.",
                cert.not_after_unix as f64,
            )?;
        }
        Ok(())
    }

    fn encode_rrl(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let s = &self.serving;
        counters(
            encoder,
            "steerdns_rrl_limited",
            "UDP responses over their rate limit ([rrl]), by response class; each was slipped \
             or dropped.",
            crate::rrl::Class::ALL
                .iter()
                .zip(&s.rrl_limited)
                .map(|(class, v)| (vec![("class", class.name().to_string())], *v)),
        )?;
        counter(
            encoder,
            "steerdns_rrl_slipped",
            "Rate-limited responses sent truncated (TC=1) so the client retries over TCP.",
            s.rrl_slipped,
        )?;
        counter(
            encoder,
            "steerdns_rrl_dropped",
            "Rate-limited responses not sent.",
            s.rrl_dropped,
        )?;
        counters(
            encoder,
            "steerdns_cookie_queries",
            "Queries with a DNS COOKIE option (RFC 7873), by what their server cookie proved: \
             client_only (none yet), invalid (not ours, another address, or expired), valid.",
            crate::dns::cookie::Verdict::ALL
                .iter()
                .zip(&s.cookies)
                .map(|(v, n)| (vec![("verdict", v.label().to_string())], *n)),
        )?;
        counters(
            encoder,
            "steerdns_shield_demand_answers",
            "Anycast answers by whether their client counted in the shield's demand and why: \
             a proven source (TCP or encrypted, or a valid cookie), a trusted resolver, or not \
             counted (plain UDP from an untrusted source, or ECS from an untrusted resolver).",
            crate::metrics::serving::DEMAND_SOURCE_LABELS
                .iter()
                .zip(&s.demand_sources)
                .map(|(label, n)| (vec![("source", label.to_string())], *n)),
        )
    }

    fn encode_series(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let pick = |want: fn(&Series) -> Option<Labels>| {
            self.series
                .iter()
                .filter_map(move |(series, n)| want(series).map(|labels| (labels, *n)))
        };
        counters(
            encoder,
            "steerdns_zone_responses",
            "DNS responses by zone and rcode; names outside every zone count as zone=\"other\".",
            pick(|s| match s {
                Series::Zone { zone, rcode } => {
                    Some(vec![("zone", zone.clone()), ("rcode", rcode.to_string())])
                }
                _ => None,
            }),
        )?;
        counters(
            encoder,
            "steerdns_steered_answers",
            "Answers computed by a steering policy, by steered name and policy (anycast or the \
             root profile).",
            pick(|s| match s {
                Series::Steered { name, policy } => {
                    Some(vec![("name", name.clone()), ("policy", policy.clone())])
                }
                _ => None,
            }),
        )?;
        counters(
            encoder,
            "steerdns_profile_answers",
            "Steered answers by profile, the endpoint it chose, and the client's region (every \
             profile on the answer's path counts).",
            pick(|s| match s {
                Series::Profile {
                    profile,
                    endpoint,
                    region,
                } => Some(vec![
                    ("profile", profile.clone()),
                    ("endpoint", endpoint.clone()),
                    ("region", region.clone()),
                ]),
                _ => None,
            }),
        )?;
        counters(
            encoder,
            "steerdns_anycast_answers",
            "Anycast answers by client region and destination (global, a region, a fallback site).",
            pick(|s| match s {
                Series::Anycast {
                    region,
                    destination,
                } => Some(vec![
                    ("region", region.clone()),
                    ("destination", destination.clone()),
                ]),
                _ => None,
            }),
        )
    }

    fn encode_tenants(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let t = &self.tenants;
        let never_served = t.refused.iter().filter(|r| !r.serving_previous).count();
        gauges(
            encoder,
            "steerdns_tenants",
            "Tenant documents by state: served active, served suspended, served from the \
             quarantine cells, refused (newest document refused; an earlier version may still \
             serve), never served.",
            [
                (
                    "active",
                    t.served.saturating_sub(t.suspended + t.quarantined),
                ),
                ("suspended", t.suspended),
                ("quarantined", t.quarantined),
                ("refused", t.refused.len()),
                ("never_served", never_served),
            ]
            .map(|(state, n)| (vec![("state", state.to_string())], n as f64)),
        )?;
        counter(
            encoder,
            "steerdns_tenant_refusals",
            "Tenant documents refused (checked alone, a name claimed twice, or by the taster).",
            t.refusals_total,
        )?;
        counter(
            encoder,
            "steerdns_tenant_changes_applied",
            "Tenant documents accepted and served (new versions).",
            t.changes_applied,
        )?;
        gauge(
            encoder,
            "steerdns_tenant_last_apply_duration_seconds",
            "How long the last batch of tenant changes took, from reading to the swap.",
            t.last_apply_ms / 1000.0,
        )?;
        gauge(
            encoder,
            "steerdns_tenants_from_cache",
            "Tenants served from the last-known-good cache at start (0: the cache was not \
             used; status says why).",
            t.cache_loaded.unwrap_or(0) as f64,
        )?;
        counter(
            encoder,
            "steerdns_tenant_cache_writes",
            "Times the tenants' last-known-good cache was written.",
            t.cache_writes,
        )?;
        let tenant =
            |p: &crate::health::tenants::TenantProbeSummary| vec![("tenant", p.tenant.clone())];
        gauges(
            encoder,
            "steerdns_tenant_monitors",
            "A tenant's own monitors (targets probed).",
            t.probes.iter().map(|p| (tenant(p), p.monitors as f64)),
        )?;
        gauges(
            encoder,
            "steerdns_tenant_monitors_down",
            "A tenant's own monitors that are down (their endpoints left out of its answers).",
            t.probes.iter().map(|p| (tenant(p), p.down as f64)),
        )?;
        gauges(
            encoder,
            "steerdns_tenant_probes_throttled",
            "1 while a tenant's monitors ask for more checks than its budget ([tenants] \
             probes_per_second) and its checks are spread out.",
            t.probes
                .iter()
                .map(|p| (tenant(p), bool_value(p.throttled))),
        )?;
        counters(
            encoder,
            "steerdns_tenant_probes_deferred",
            "A tenant's checks started later than due (its budget or its slots): its \
             intervals stretched, no other tenant's.",
            t.probes.iter().map(|p| (tenant(p), p.deferred_total)),
        )
    }

    fn encode_cells(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let impaired = self.cells.as_ref().map_or(0, |c| c.impaired.len());
        gauge(
            encoder,
            "steerdns_cells_impaired",
            "Cells left out of tenants' answers (drained, probe down or hot by their load).",
            impaired as f64,
        )?;
        let rows = self.cells.iter().flat_map(|c| &c.impaired).flat_map(|i| {
            i.reason.split('+').map(move |why| {
                let labels = vec![
                    ("layer", i.layer.clone()),
                    ("cell", i.cell.clone()),
                    ("reason", why.to_string()),
                ];
                (labels, 1.0)
            })
        });
        gauges(
            encoder,
            "steerdns_cell_impaired",
            "1 per impaired cell and reason (drained, probe-down, hot).",
            rows,
        )?;
        let loads = self.shield.cells.iter().filter_map(|c| {
            let labels = vec![("layer", c.layer.clone()), ("cell", c.cell.clone())];
            Some((labels, c.utilisation?))
        });
        gauges(
            encoder,
            "steerdns_cell_utilisation",
            "A cell's load over its capacity at the last fresh reading of the feed.",
            loads,
        )?;
        let blame = self.cells.as_ref().and_then(|c| c.blame.as_ref());
        gauges(
            encoder,
            "steerdns_cell_blame_verdict",
            "1 for blame's verdict over the impaired cells (named: the suspects hold every \
             impaired cell and chance explains less than one tenant); all 0 while none is.",
            crate::cells::blame::Verdict::ALL.map(|v| {
                let on = blame.is_some_and(|b| b.verdict == v.as_str());
                (vec![("verdict", v.as_str().to_string())], bool_value(on))
            }),
        )?;
        gauge(
            encoder,
            "steerdns_cell_blame_suspects",
            "Tenants whose shards hold the most impaired cells (status lists them).",
            blame.map_or(0, |b| b.tied) as f64,
        )
    }

    fn encode_budgets(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let Some(b) = &self.budgets else {
            return Ok(());
        };
        gauge(
            encoder,
            "steerdns_tenant_budgets_engaged",
            "1 while UDP load is above [budgets] engage_at and tenants' budgets apply.",
            bool_value(b.engaged),
        )?;
        gauge(
            encoder,
            "steerdns_tenant_budgets_utilisation",
            "UDP queries per second in the last sample over [budgets] capacity_qps.",
            b.utilisation,
        )?;
        counter(
            encoder,
            "steerdns_tenant_budgets_engagements",
            "Times the tenants' budgets engaged since start.",
            b.engagements,
        )?;
        counters(
            encoder,
            "steerdns_tenant_budget_limited",
            "UDP responses over a tenant's budget while engaged: dropped, or sent truncated.",
            [("dropped", b.dropped), ("slipped", b.slipped)]
                .map(|(verdict, n)| (vec![("verdict", verdict.to_string())], n)),
        )
    }

    fn encode_control(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let st = &self.status;
        gauge(
            encoder,
            "steerdns_control_serial",
            "Serial of the control version being served.",
            st.serial as f64,
        )?;
        counters(
            encoder,
            "steerdns_reloads",
            "Reloads (startup, control file, SIGHUP, API) by result.",
            [
                (
                    vec![("result", "accepted".to_string())],
                    st.reloads_accepted,
                ),
                (vec![("result", "refused".to_string())], st.reloads_refused),
            ],
        )?;
        gauges(
            encoder,
            "steerdns_dnssec_zone_not_served",
            "1 for each zone of [dnssec] zones left out of service because its keys could not \
             be read (never served unsigned; the other zones are served).",
            self.dnssec_not_served
                .iter()
                .map(|zone| (vec![("zone", zone.clone())], 1.0)),
        )?;
        counter(
            encoder,
            "steerdns_control_checks",
            "Times the control file was looked at for a change (watcher events and polls).",
            st.control_checks,
        )?;
        gauge(
            encoder,
            "steerdns_last_reload_duration_seconds",
            "How long the last accepted reload took, from reading files to the swap.",
            st.last_reload_ms / 1000.0,
        )?;
        gauge(
            encoder,
            "steerdns_startup_first_answer_seconds",
            "From the start of this process's first load to its first snapshot served.",
            st.startup.first_answer_ms / 1000.0,
        )?;
        gauge(
            encoder,
            "steerdns_startup_fully_loaded_seconds",
            "From the start of this process's first load to the first load served whole, \
             zones and all (later than the first answer on a start from the zone cache, whose \
             precompiled answers serve first); 0 while the zones load.",
            st.startup.fully_loaded_ms / 1000.0,
        )?;
        gauge(
            encoder,
            "steerdns_startup_loading",
            "1 while the zone cache's precompiled answers serve and the zones load (queries \
             they do not cover are held), 0 once the first load serves whole.",
            if st.startup.is_loading() { 1.0 } else { 0.0 },
        )?;
        counter(
            encoder,
            "steerdns_queries_held_while_loading",
            "Queries held (dropped: the resolver asks again) while the zones loaded at startup, \
             because the zone cache's precompiled answers do not cover them.",
            crate::metrics::serving::held_while_loading(),
        )?;
        gauge(
            encoder,
            "steerdns_startup_tasted",
            "1 when the first load went through the taster, 0 when it was not tasted (the \
             taster is off, or the inputs were exactly what this binary last served).",
            if st.startup.tasted { 1.0 } else { 0.0 },
        )?;
        gauge(
            encoder,
            "steerdns_startup_zones_from_cache",
            "1 when the first load took its zones from the last-known-good zone cache, 0 \
             when it built them from the zone files (status says why).",
            if st.startup.zones_from_cache {
                1.0
            } else {
                0.0
            },
        )?;
        let taster = &st.taster;
        counters(
            encoder,
            "steerdns_taster_runs",
            "Changes tasted by the taster child process, by outcome (ok; problems: the change \
             is invalid; crashed: killed by a signal, out of memory, CPU limit; timeout).",
            [
                ("ok", taster.ok),
                ("problems", taster.problems),
                ("crashed", taster.crashed),
                ("timeout", taster.timed_out),
            ]
            .map(|(result, n)| (vec![("result", result.to_string())], n)),
        )?;
        gauge(
            encoder,
            "steerdns_taster_last_duration_seconds",
            "How long the last taste took, from starting the child to its verdict.",
            taster.last_ms / 1000.0,
        )?;
        if let Some(bundle) = &st.bundle {
            gauge(
                encoder,
                "steerdns_bundle_pending",
                "1 while this node's live config/zone/GeoIP files (a tasted bundle) wait for the fleet's rollout to release them; the bundle served stays.",
                bool_value(bundle.pending.is_some()),
            )?;
            gauge(
                encoder,
                "steerdns_bundle_refused",
                "1 while the newest config/zone/GeoIP bundle of this node is refused (its taster crashed, or it did not load).",
                bool_value(bundle.refused.is_some()),
            )?;
        }
        let endpoint =
            |(p, e): (&String, &String)| vec![("profile", p.clone()), ("endpoint", e.clone())];
        gauges(
            encoder,
            "steerdns_endpoint_weight",
            "Weight served for each endpoint of a weighted profile (0 when disabled).",
            self.endpoints
                .iter()
                .filter_map(|(p, e, w, _)| w.map(|w| (endpoint((p, e)), f64::from(w)))),
        )?;
        gauges(
            encoder,
            "steerdns_endpoint_enabled",
            "1 if the endpoint is enabled, 0 if the control file disabled it.",
            self.endpoints
                .iter()
                .map(|(p, e, _, on)| (endpoint((p, e)), bool_value(*on))),
        )?;
        if let Some(health) = &self.health {
            encode_health(encoder, health)?;
        }
        let version = vec![("version", env!("CARGO_PKG_VERSION").to_string())];
        gauges(
            encoder,
            "steerdns_build_info",
            "Always 1; the labels say which build is running.",
            [(version, 1.0)],
        )
    }

    fn encode_shield(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let sh = &self.shield;
        let region = |name: &String| vec![("region", name.clone())];
        gauges(
            encoder,
            "steerdns_shield_shed_fraction",
            "Share of a region's clients the shield sends away from global anycast (0..1).",
            sh.regions
                .iter()
                .map(|r| (region(&r.name), r.shed_fraction)),
        )?;
        gauges(
            encoder,
            "steerdns_shield_destination_fraction",
            "Share of a region's clients shed to each destination (sums to the shed fraction).",
            sh.regions.iter().flat_map(|r| {
                r.destinations.iter().map(|(to, share)| {
                    let labels = vec![("region", r.name.clone()), ("destination", to.clone())];
                    (labels, r.shed_fraction * share)
                })
            }),
        )?;
        gauges(
            encoder,
            "steerdns_shield_tenant_shed_fraction",
            "Tenant-first shedding: share of a tenant's clients in a region shed on their own, \
             ahead of the region (0..1; present while shed).",
            sh.tenants.iter().map(|t| {
                let labels = vec![("tenant", t.tenant.clone()), ("region", t.region.clone())];
                (labels, t.shed_fraction)
            }),
        )?;
        gauges(
            encoder,
            "steerdns_shield_tenant_share",
            "Tenant-first shedding: a shed tenant's share of its region's load (the limit is \
             [shield] tenant_share).",
            sh.tenants.iter().map(|t| {
                let labels = vec![("tenant", t.tenant.clone()), ("region", t.region.clone())];
                (labels, t.share)
            }),
        )?;
        gauges(
            encoder,
            "steerdns_shield_hot",
            "1 while a region is above its low watermark (its clients get the short TTL).",
            sh.regions
                .iter()
                .map(|r| (region(&r.name), bool_value(r.hot))),
        )?;
        let rings = || {
            let regions = sh.regions.iter().map(|r| ("region", r));
            let sites = sh.sites.iter().map(|s| ("fallback", s));
            regions.chain(sites)
        };
        let ring =
            |kind: &str, name: &String| vec![("ring", kind.to_string()), ("name", name.clone())];
        gauges(
            encoder,
            "steerdns_utilisation",
            "Load divided by capacity from the latest load feed, per region and fallback site.",
            rings().filter_map(|(k, r)| r.utilisation.map(|u| (ring(k, &r.name), u))),
        )?;
        gauges(
            encoder,
            "steerdns_load",
            "Load from the latest load feed (the feed's units).",
            rings().filter_map(|(k, r)| r.load.map(|v| (ring(k, &r.name), v))),
        )?;
        gauges(
            encoder,
            "steerdns_capacity",
            "Capacity from the latest load feed (the feed's units).",
            rings().filter_map(|(k, r)| r.capacity.map(|v| (ring(k, &r.name), v))),
        )?;
        if let Some(age) = self.feed_age_secs {
            gauge(
                encoder,
                "steerdns_load_feed_age_seconds",
                "Age of the latest accepted load feed (from its measurement time); absent \
                 before the first feed.",
                age,
            )?;
        }
        counters(
            encoder,
            "steerdns_load_feeds",
            "Load feeds received, by result.",
            [
                (
                    vec![("result", "accepted".to_string())],
                    self.feeds.accepted,
                ),
                (vec![("result", "refused".to_string())], self.feeds.refused),
            ],
        )?;
        counter(
            encoder,
            "steerdns_shield_ticks",
            "Shield ticks run since the server started (shield.ticks in /v1/status).",
            sh.ticks,
        )?;
        counter(
            encoder,
            "steerdns_shield_state_repairs",
            "Shield ticks whose state held a non-finite number and was repaired (a bug; see \
             shield.last_state_repair in /v1/status).",
            sh.state_repairs,
        )?;
        gauge(
            encoder,
            "steerdns_shield_alerts",
            "Shield alerts standing now (no headroom, stale or missing feed, state repaired); \
             see /v1/status.",
            sh.alerts.len() as f64,
        )?;
        self.encode_fleet_shield(encoder)
    }

    /// Fleet mode's shield: who leads, which published state is served, how fresh the link is.
    fn encode_fleet_shield(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let Some(fleet) = &self.shield.fleet else {
            return Ok(());
        };
        gauge(
            encoder,
            "steerdns_shield_fleet_leader",
            "1 while this node is the fleet's shield leader (holds <prefix>/shield/leader).",
            bool_value(fleet.role == "leader"),
        )?;
        gauge(
            encoder,
            "steerdns_shield_fleet_revision",
            "The published shield state revision this node serves (0: none, or decaying alone \
             without etcd).",
            fleet.revision.unwrap_or(0) as f64,
        )?;
        gauge(
            encoder,
            "steerdns_shield_fleet_contact_age_seconds",
            "Seconds since etcd last answered the shield's exchange (-1: never).",
            fleet.contact_age_secs.unwrap_or(-1.0),
        )?;
        gauge(
            encoder,
            "steerdns_shield_fleet_fail_static",
            "1 while etcd is unreachable and the last published state is served unchanged, 2 \
             once reverting to normal answers after revert_after_secs.",
            match fleet.role.as_str() {
                "fail-static" => 1.0,
                "reverting" => 2.0,
                _ => 0.0,
            },
        )?;
        gauge(
            encoder,
            "steerdns_shield_fleet_state_stale",
            "1 while the published shield state has not been renewed for several republish \
             periods (the leader stopped deciding; decays after revert_after_secs).",
            bool_value(fleet.stale),
        )?;
        counter(
            encoder,
            "steerdns_shield_fleet_refused",
            "Shield records from etcd refused (published states, node reports); see \
             shield.fleet.last_refusal in /v1/status.",
            fleet.refused,
        )
    }
}

impl Scrape {
    fn encode_xdp(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let Some(xdp) = &self.xdp else {
            return Ok(());
        };
        gauge(
            encoder,
            "steerdns_xdp_attached",
            "1 when the AF_XDP path serves UDP queries; 0 when it could not attach (see /v1/status).",
            bool_value(xdp.attach.is_some()),
        )?;
        type Field = fn(&crate::metrics::xdp::QueueView) -> u64;
        let families: [(&str, &str, Field); 8] = [
            (
                "steerdns_xdp_rx_frames",
                "Frames taken from an AF_XDP RX ring, per queue.",
                |q| q.rx,
            ),
            (
                "steerdns_xdp_tx_frames",
                "Replies put on an AF_XDP TX ring, per queue.",
                |q| q.tx,
            ),
            (
                "steerdns_xdp_dropped_frames",
                "Received frames not answered (malformed, silent, no TX room), per queue.",
                |q| q.dropped,
            ),
            (
                "steerdns_xdp_tx_ring_full",
                "Replies dropped because the TX ring was full, per queue.",
                |q| q.tx_ring_full,
            ),
            (
                "steerdns_xdp_tx_kicks",
                "TX kicks (sendto syscalls) made, per queue; tx_frames / tx_kicks = replies per kick.",
                |q| q.tx_kicks,
            ),
            (
                "steerdns_xdp_rx_ring_full",
                "Frames the kernel dropped because the RX ring was full, per queue.",
                |q| q.rx_ring_full,
            ),
            (
                "steerdns_xdp_fill_ring_empty",
                "Frames the kernel dropped for want of a fill-ring frame, per queue.",
                |q| q.fill_ring_empty,
            ),
            (
                "steerdns_xdp_kernel_rx_dropped",
                "Other receive drops the kernel counted on the AF_XDP socket, per queue.",
                |q| q.kernel_rx_dropped,
            ),
        ];
        for (name, help, field) in families {
            let rows = xdp
                .queues
                .iter()
                .map(|q| (vec![("queue", q.queue.to_string())], field(q)));
            counters(encoder, name, help, rows)?;
        }
        Ok(())
    }
}

impl Scrape {
    /// Fleet mode only: nothing is exported for a single node.
    fn encode_fleet(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let Some(fleet) = &self.fleet else {
            return Ok(());
        };
        gauge(
            encoder,
            "steerdns_fleet_link_up",
            "1 while connected to etcd and watching the fleet's control state; 0 while serving what this node has.",
            bool_value(fleet.connected),
        )?;
        gauge(
            encoder,
            "steerdns_fleet_link_state_seconds",
            "Seconds since the etcd link last went up or down (with link_up: down for how long).",
            fleet.since_secs,
        )?;
        gauge(
            encoder,
            "steerdns_fleet_local_override",
            "1 while this node serves a local override sent with --direct (etcd does not hold it yet); 0 otherwise.",
            bool_value(fleet.local_override.is_some()),
        )?;
        gauge(
            encoder,
            "steerdns_fleet_local_override_conflict",
            "1 while this node's local override waits for `control override drop` because etcd holds a newer, different version.",
            bool_value(
                fleet
                    .local_override
                    .as_ref()
                    .is_some_and(|o| o.conflict.is_some()),
            ),
        )?;
        counter(
            encoder,
            "steerdns_fleet_etcd_connections",
            "etcd clients this node has made: one shared by all its fleet tasks, one more after each session that ended on it.",
            fleet.etcd_connections,
        )?;
        gauge(
            encoder,
            "steerdns_fleet_known_nodes",
            "Nodes in the registry this node last saw in etcd (what --direct reaches during an outage).",
            fleet.known_nodes as f64,
        )?;
        gauge(
            encoder,
            "steerdns_fleet_control_revision",
            "etcd revision of the fleet control version this node serves.",
            fleet.revision_served as f64,
        )?;
        gauge(
            encoder,
            "steerdns_fleet_watch_lag_revisions",
            "Newest control revision seen in etcd minus the one served (0 when caught up; a refused version keeps it above 0).",
            fleet.revision_latest.saturating_sub(fleet.revision_served).max(0) as f64,
        )?;
        gauge(
            encoder,
            "steerdns_fleet_apply_seconds",
            "Seconds from receiving the last control change from etcd to serving it on this node.",
            fleet.last_apply_ms.unwrap_or(0.0) / 1000.0,
        )?;
        gauge(
            encoder,
            "steerdns_fleet_convergence_seconds",
            "Seconds from the last control change's write until every live node served it, as measured by the command that wrote it.",
            fleet.last_convergence_ms.unwrap_or(0.0) / 1000.0,
        )?;
        gauge(
            encoder,
            "steerdns_fleet_refused",
            "1 while the fleet's newest control version is refused here (the last good one serves).",
            bool_value(fleet.refused_revision.is_some()),
        )?;
        gauge(
            encoder,
            "steerdns_fleet_bad_records",
            "Records under the fleet's prefix this node's fleet tasks skip because they do not decode (keys in fleet.bad_records of /v1/status).",
            fleet.bad_records.len() as f64,
        )?;
        gauge(
            encoder,
            "steerdns_fleet_coordinator_failing",
            "1 while this node's rollout coordinator task fails and retries (fleet.coordinator_error in /v1/status).",
            bool_value(fleet.coordinator_error.is_some()),
        )?;
        gauge(
            encoder,
            "steerdns_fleet_registration_refused",
            "1 while another live node holds this node's name in the registry (this node does not register).",
            bool_value(fleet.registration_refused.is_some()),
        )?;
        let Some(rollout) = &fleet.rollout else {
            return Ok(());
        };
        const PHASES: [&str; 7] = [
            "none",
            "running",
            "halted",
            "completed",
            "aborted",
            "missing",
            "unreadable",
        ];
        gauges(
            encoder,
            "steerdns_fleet_rollout_phase",
            "1 for the phase of the fleet's staged rollout as this node sees it (halted: a gate failed and every node serves the last known good).",
            PHASES.iter().map(|phase| {
                (
                    vec![("phase", phase.to_string())],
                    bool_value(rollout.phase == *phase),
                )
            }),
        )?;
        gauge(
            encoder,
            "steerdns_fleet_rollout_candidate_revision",
            "Control revision being rolled out (or the last one rolled out).",
            rollout.candidate as f64,
        )?;
        gauge(
            encoder,
            "steerdns_fleet_rollout_lkg_revision",
            "Control revision of the fleet's last known good.",
            rollout.lkg as f64,
        )?;
        gauge(
            encoder,
            "steerdns_fleet_rollout_waves_released",
            "Waves of the rollout released so far (1: the canary).",
            rollout.released as f64,
        )?;
        gauge(
            encoder,
            "steerdns_fleet_rollout_held",
            "1 while the fleet's newest control version is not released to this node's wave (it serves the last known good).",
            bool_value(rollout.held),
        )?;
        gauge(
            encoder,
            "steerdns_fleet_rollout_coordinator",
            "1 while this node drives the fleet's rollouts (holds the coordinator key).",
            bool_value(rollout.coordinator),
        )
    }
}

impl Collector for Scrape {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        self.encode_serving(&mut encoder)?;
        self.encode_series(&mut encoder)?;
        self.encode_control(&mut encoder)?;
        self.encode_tenants(&mut encoder)?;
        self.encode_cells(&mut encoder)?;
        self.encode_budgets(&mut encoder)?;
        self.encode_shield(&mut encoder)?;
        self.encode_xdp(&mut encoder)?;
        self.encode_admin(&mut encoder)?;
        self.encode_supervisor(&mut encoder)?;
        encode_safety(&mut encoder, &self.safety)?;
        encode_drills(&mut encoder, &self.drills)?;
        encode_secondary(&mut encoder, &self.secondary)?;
        encode_transfer(&mut encoder, self.transfer.as_ref(), &self.transfer_counts)?;
        self.encode_fleet(&mut encoder)
    }
}

impl Scrape {
    /// The daemon's supervised threads and tasks ([`crate::daemon::Supervisor`]).
    fn encode_supervisor(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let s = &self.supervisor;
        gauge(
            encoder,
            "steerdns_supervised_parts_running",
            "Threads and tasks of the daemon running now (listeners, reloads, fleet, probes...).",
            s.running as f64,
        )?;
        counter(
            encoder,
            "steerdns_supervised_parts_started",
            "Threads and tasks the daemon started.",
            s.started as u64,
        )?;
        counter(
            encoder,
            "steerdns_supervised_parts_unexpected_exits",
            "Threads and tasks that ended before shutdown or panicked (logged at ERROR with \
             the part's name; /v1/status names the last one). Alert on any increase.",
            s.unexpected_exits,
        )
    }

    /// The admin endpoint's connections and the descriptor budget ([`crate::descriptors`]).
    fn encode_admin(&self, encoder: &mut DescriptorEncoder) -> fmt::Result {
        let a = &self.admin;
        gauge(
            encoder,
            "steerdns_admin_connections_open",
            "Admin endpoint connections open now.",
            a.open as f64,
        )?;
        gauge(
            encoder,
            "steerdns_admin_connections_max",
            "[admin] max_connections.",
            a.max_connections as f64,
        )?;
        counter(
            encoder,
            "steerdns_admin_connections",
            "Admin endpoint connections accepted.",
            a.accepted,
        )?;
        let reason = |r: &str| vec![("reason", r.to_string())];
        counters(
            encoder,
            "steerdns_admin_connections_closed",
            "Admin connections closed by the server: header_timeout (a request head not \
             complete within [admin] header_timeout_ms), idle_timeout (no request within \
             idle_timeout_secs), evicted (its place given to a newcomer when every place or \
             the descriptor reserve was taken).",
            [
                (reason("header_timeout"), a.closed_header_timeout),
                (reason("idle_timeout"), a.closed_idle_timeout),
                (reason("evicted"), a.evicted),
            ],
        )?;
        counters(
            encoder,
            "steerdns_admin_connections_refused",
            "Admin connections closed at once: every place was serving a request (full), or \
             so with the descriptor reserve reached (descriptors).",
            [
                (reason("full"), a.refused_full),
                (reason("descriptors"), a.refused_descriptors),
            ],
        )?;
        counter(
            encoder,
            "steerdns_admin_accept_errors",
            "Admin endpoint accepts that failed (EMFILE and friends).",
            a.accept_errors,
        )?;
        let d = &self.descriptors;
        gauge(
            encoder,
            "steerdns_descriptors_limit",
            "The soft RLIMIT_NOFILE (0: unknown).",
            d.limit as f64,
        )?;
        gauge(
            encoder,
            "steerdns_descriptors_open_estimate",
            "Descriptors open at start plus the listeners' connections open now.",
            d.open_estimate as f64,
        )?;
        gauge(
            encoder,
            "steerdns_descriptors_reserve",
            "[admin] descriptor_reserve.",
            d.reserve as f64,
        )?;
        counter(
            encoder,
            "steerdns_dns_connections_refused_descriptors",
            "DNS connections (TCP, DoT, DoH) closed at once to keep the descriptor reserve and \
             the admin endpoint's share free.",
            d.refused_dns,
        )
    }
}

/// Drill runs by result, each drill's last measured times and whether its failure alerts.
fn encode_drills(
    encoder: &mut DescriptorEncoder,
    drills: &crate::drill::log::DrillStatus,
) -> fmt::Result {
    counters(
        encoder,
        "steerdns_drill_runs",
        "Drill runs in the drill log, by drill and result (passed, failed, blocked).",
        drills.runs.iter().flat_map(|(drill, results)| {
            results.iter().map(move |(result, n)| {
                (
                    vec![("drill", drill.clone()), ("result", result.clone())],
                    *n,
                )
            })
        }),
    )?;
    let last = |f: fn(&crate::drill::DrillRun) -> Option<f64>| -> Vec<(Labels, f64)> {
        drills
            .drills
            .iter()
            .filter_map(|d| Some((vec![("drill", d.name.clone())], f(d.last.as_ref()?)?)))
            .collect()
    };
    gauges(
        encoder,
        "steerdns_drill_change_to_served_ms",
        "The drill's last run: from writing the change to every sample subnet served (ms; in fleet mode, served on every node).",
        last(|r| r.change_to_served_ms),
    )?;
    gauges(
        encoder,
        "steerdns_drill_revert_to_served_ms",
        "The drill's last run: from writing the revert to every sample subnet served (ms; in fleet mode, served on every node).",
        last(|r| r.revert_to_served_ms),
    )?;
    gauges(
        encoder,
        "steerdns_drill_nodes_served",
        "The drill's last run: the fleet nodes that served its change (0 on a single node).",
        last(|r| Some(r.nodes.len() as f64)),
    )?;
    gauges(
        encoder,
        "steerdns_drill_alert",
        "1 while the drill's last run failed (an alert), else 0.",
        drills.drills.iter().map(|d| {
            let failed = d.last.as_ref().is_some_and(|r| r.result == "failed");
            (vec![("drill", d.name.clone())], bool_value(failed))
        }),
    )?;
    gauge(
        encoder,
        "steerdns_drill_running",
        "1 while a drill holds the drill lock.",
        bool_value(drills.running),
    )
}

/// Secondary zones: the serial served, expired or not, transfers in by result.
fn encode_secondary(
    encoder: &mut DescriptorEncoder,
    zones: &BTreeMap<String, crate::secondary::ZoneStatus>,
) -> fmt::Result {
    gauges(
        encoder,
        "steerdns_secondary_serial",
        "The SOA serial a secondary zone serves (absent until its first transfer).",
        zones
            .iter()
            .filter_map(|(zone, s)| Some((vec![("zone", zone.clone())], f64::from(s.serial?)))),
    )?;
    gauges(
        encoder,
        "steerdns_secondary_expired",
        "1 while a secondary zone is past its SOA expire time without reaching a primary.",
        zones
            .iter()
            .map(|(zone, s)| (vec![("zone", zone.clone())], bool_value(s.expired))),
    )?;
    counters(
        encoder,
        "steerdns_secondary_transfers",
        "Transfers in and refresh checks of secondary zones, by result (ok, refused, check_failed).",
        zones.iter().flat_map(|(zone, s)| {
            [
                ("ok", s.transfers_ok),
                ("refused", s.transfers_refused),
                ("check_failed", s.checks_failed),
            ]
            .into_iter()
            .map(move |(result, n)| {
                (
                    vec![("zone", zone.clone()), ("result", result.to_string())],
                    n,
                )
            })
        }),
    )?;
    encode_notifies_in(encoder, zones)
}

/// NOTIFYs to secondary zones (RFC 1996): per zone accepted and refused, and those refused for
/// no secondary zone of this server (zone "-") by reason.
fn encode_notifies_in(
    encoder: &mut DescriptorEncoder,
    zones: &BTreeMap<String, crate::secondary::ZoneStatus>,
) -> fmt::Result {
    let row = |zone: &str, result: &str, n: u64| {
        (
            vec![("zone", zone.to_string()), ("result", result.to_string())],
            n,
        )
    };
    let per_zone = zones.iter().flat_map(|(zone, s)| {
        [
            row(zone, "accepted", s.notifies_accepted),
            row(zone, "refused", s.notifies_refused),
        ]
    });
    let unzoned = crate::secondary::notify::unzoned_refusals()
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(reason, n)| row("-", reason, n));
    counter(
        encoder,
        "steerdns_notify_refusals_limited",
        "Refused NOTIFYs left unanswered because their source prefix (/24, /56) was over the \
         refusal rate (5 a second, bursts of 20): a flood of bad NOTIFYs is not reflected.",
        crate::secondary::notify::refusals_dropped(),
    )?;
    counters(
        encoder,
        "steerdns_secondary_notifies",
        "NOTIFYs received for secondary zones, by zone and result (accepted, refused: not from a \
         primary, unsigned or a bad TSIG); zone \"-\": for no secondary zone here (not_secondary) \
         or unreadable (malformed).",
        per_zone.chain(unzoned),
    )
}

/// Zone transfers out and NOTIFY: transfers by zone, kind and result (ok or the refusal
/// reason), NOTIFYs by zone, target and result, and per zone its serial and journal depth.
fn encode_transfer(
    encoder: &mut DescriptorEncoder,
    zones: Option<&BTreeMap<String, super::transfer::ZoneTransferView>>,
    counts: &crate::metrics::transfer::TransferReport,
) -> fmt::Result {
    counters(
        encoder,
        "steerdns_transfers_out",
        "Zone transfer requests answered, by zone, kind (axfr, ixfr, ixfr_full, ixfr_current) \
         and result (ok, or why refused: network, unsigned, key, tsig_badsig, tsig_badkey, \
         tsig_badtime, busy, rate, not_zone, malformed).",
        counts.transfers.iter().map(|(zone, kind, result, n)| {
            let labels = vec![
                ("zone", zone.clone()),
                ("kind", kind.to_string()),
                ("result", result.to_string()),
            ];
            (labels, *n)
        }),
    )?;
    counters(
        encoder,
        "steerdns_notify",
        "NOTIFYs of a serial change, by zone, target and result (acked, timeout, refused, \
         notauth, bad_tsig, error).",
        counts.notifies.iter().map(|(zone, target, result, n)| {
            let labels = vec![
                ("zone", zone.clone()),
                ("target", target.clone()),
                ("result", result.to_string()),
            ];
            (labels, *n)
        }),
    )?;
    let Some(zones) = zones else {
        return Ok(());
    };
    gauges(
        encoder,
        "steerdns_transfer_serial",
        "The SOA serial a zone is transferred at.",
        zones
            .iter()
            .map(|(zone, v)| (vec![("zone", zone.clone())], f64::from(v.serial))),
    )?;
    gauges(
        encoder,
        "steerdns_transfer_journal_depth",
        "Differences the IXFR journal keeps for a zone.",
        zones
            .iter()
            .map(|(zone, v)| (vec![("zone", zone.clone())], v.journal_depth as f64)),
    )?;
    gauges(
        encoder,
        "steerdns_transfer_projected_names",
        "Steered names a zone's transfers carry as their static projection.",
        zones
            .iter()
            .map(|(zone, v)| (vec![("zone", zone.clone())], v.projected_names as f64)),
    )?;
    gauges(
        encoder,
        "steerdns_notify_acked_serial",
        "The serial a NOTIFY target last acknowledged.",
        zones.iter().flat_map(|(zone, v)| {
            v.status.notify.iter().filter_map(move |(target, t)| {
                let labels = vec![("zone", zone.clone()), ("target", target.clone())];
                Some((labels, f64::from(t.acked_serial?)))
            })
        }),
    )
}

/// Changes refused and overrides recorded, by safety rule id.
fn encode_safety(
    encoder: &mut DescriptorEncoder,
    safety: &crate::safety::tally::SafetyStatus,
) -> fmt::Result {
    let by_rule = |counts: &BTreeMap<String, u64>| -> Vec<(Labels, u64)> {
        counts
            .iter()
            .map(|(rule, n)| (vec![("rule", rule.clone())], *n))
            .collect()
    };
    counters(
        encoder,
        "steerdns_safety_refusals",
        "Control changes refused by a safety rule (by the CLI, reported here, or the admin API).",
        by_rule(&safety.refusals),
    )?;
    counters(
        encoder,
        "steerdns_safety_overrides",
        "Control changes the admin API let through with an override of the rule.",
        by_rule(&safety.overrides),
    )
}
