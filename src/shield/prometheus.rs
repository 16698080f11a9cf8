//! The Prometheus load source (`[shield.prometheus]`): every `interval_ms` an instant query
//! (`GET <url>/api/v1/query`) for region load, optionally one for fallback-site load and one
//! for capacities; the label named by `label` (default `region`) says which region or site a
//! series is. Capacities not given by the capacity query come from `[topology]`.
//!
//! ```toml
//! [shield.prometheus]
//! url = "http://prometheus.internal:9090"   # or https:// (system CA bundle, or:)
//! # ca_file = "/etc/steerdns/prometheus-ca.pem"
//! region_query = 'sum by (region) (rate(edge_requests_total[1m]))'
//! fallback_query = 'sum by (region) (rate(fallback_requests_total[1m]))'
//! # capacity_query = 'max by (region) (edge_capacity_rps)'
//! # tenant_query = 'sum by (tenant, region) (rate(edge_requests_total[1m]))'
//! label = "region"
//! # tenant_label = "tenant"
//! # cell_query = 'sum by (layer, cell) (rate(cell_requests_total[1m]))'
//! # cell_capacity_query = 'max by (layer, cell) (cell_capacity_rps)'
//! # cell_layer_label = "layer"
//! # cell_label = "cell"
//! interval_ms = 5000
//! timeout_ms = 2000
//! ```
//!
//! The optional tenant query gives one series per tenant and client region — the load that
//! tenant's clients located in the region bring, wherever they are served — labelled by
//! `tenant_label` and `label`: the feed's `tenants` section, for tenant-first shedding.
//!
//! The optional cell queries give one series per anycast cell (load, and capacity), labelled
//! by `cell_layer_label` (`global`, a region's or a fallback site's name) and `cell_label`:
//! the feed's `cells` section, which leaves a hot cell out of tenants' answers.
//!
//! The results become a [`FeedEntries`] checked by [`check_entries`], the very checks every
//! JSON feed passes (unknown names, NaN, negative or absurd values refuse the whole result,
//! with the reason in status). A Prometheus that cannot be reached, times out or answers an
//! error offers nothing, so the last feed ages and the shield treats it as stale (frozen, then
//! reverting) exactly as when a load file stops changing; the failure is counted as a refusal
//! once per distinct reason and shown in status.
//!
//! The HTTP exchange runs on a worker thread of its own: [`LoadSource::poll`] on the shield's
//! thread only hands out a job when one is due and picks up finished results, so a hung
//! Prometheus never delays a decision. Owns the query, its parsing and the assembly of the
//! entries; the decisions are [`super::step`]'s.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};
use std::time::{Duration, Instant, SystemTime};

use serde::Deserialize;

use super::feed::{check_entries, FeedEntries, FeedError, FeedNames};
use super::source::{FeedOrigin, FeedSlot, LoadSource};
use crate::config::prometheus::PrometheusConfig;
use crate::http_client::{encode_query_value, parse_base_url, request_url, tls_config, Request};

/// Largest Prometheus answer read.
const MAX_RESPONSE: u64 = 4 << 20;

/// One series of an instant vector: the label's value, the sample value, its time (seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub name: String,
    pub value: f64,
    pub time: f64,
}

#[derive(Deserialize)]
struct ApiAnswer {
    status: String,
    #[serde(default)]
    data: Option<ApiData>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct ApiData {
    #[serde(rename = "resultType")]
    result_type: String,
    result: serde_json::Value,
}

#[derive(Deserialize)]
struct ApiSeries {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

/// Reads an `/api/v1/query` answer that must be an instant vector, each series carrying
/// `label`. Errors say what Prometheus said or what is wrong with the answer.
pub fn parse_vector(status: u16, body: &str, label: &str) -> Result<Vec<Row>, String> {
    parse_series(status, body)?
        .into_iter()
        .map(|s| row_of(s, label))
        .collect()
}

/// One series of the tenant query: the tenant, the region, the load, its time (seconds).
#[derive(Debug, Clone, PartialEq)]
pub struct TenantRow {
    pub tenant: String,
    pub row: Row,
}

/// [`parse_vector`] for the tenant query: each series carries `tenant_label` and `label`.
pub fn parse_tenant_vector(
    status: u16,
    body: &str,
    tenant_label: &str,
    label: &str,
) -> Result<Vec<TenantRow>, String> {
    parse_series(status, body)?
        .into_iter()
        .map(|s| {
            let tenant =
                s.metric.get(tenant_label).cloned().ok_or_else(|| {
                    format!("a series has no label {tenant_label:?}: {:?}", s.metric)
                })?;
            Ok(TenantRow {
                tenant,
                row: row_of(s, label)?,
            })
        })
        .collect()
}

/// The series of an instant-vector answer.
fn parse_series(status: u16, body: &str) -> Result<Vec<ApiSeries>, String> {
    let answer: ApiAnswer = serde_json::from_str(body).map_err(|e| {
        format!(
            "HTTP {status}, not a Prometheus API answer ({e}): {:?}",
            body.chars().take(120).collect::<String>()
        )
    })?;
    if answer.status != "success" {
        return Err(format!(
            "HTTP {status}, {}: {}",
            answer.error_type.as_deref().unwrap_or("error"),
            answer.error.as_deref().unwrap_or("(no message)")
        ));
    }
    let data = answer.data.ok_or("a success without data")?;
    if data.result_type != "vector" {
        return Err(format!(
            "the query must give an instant vector, it gave a {}",
            data.result_type
        ));
    }
    serde_json::from_value(data.result).map_err(|e| format!("malformed result: {e}"))
}

/// A series as a row named by its `label`.
fn row_of(s: ApiSeries, label: &str) -> Result<Row, String> {
    let name = s
        .metric
        .get(label)
        .cloned()
        .ok_or_else(|| format!("a series has no label {label:?}: {:?}", s.metric))?;
    // Prometheus writes NaN and ±Inf as "NaN", "+Inf", "-Inf"; Rust reads all three.
    let value = s
        .value
        .1
        .parse::<f64>()
        .map_err(|_| format!("{name}: sample value {:?} is not a number", s.value.1))?;
    Ok(Row {
        name,
        value,
        time: s.value.0,
    })
}

/// Capacities from `[topology]`, by region and by fallback site name (every configured name,
/// `None` where the topology gives no capacity).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Capacities {
    pub regions: BTreeMap<String, Option<f64>>,
    pub sites: BTreeMap<String, Option<f64>>,
}

/// What one round of queries brought back.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    pub regions: Vec<Row>,
    pub fallback: Vec<Row>,
    /// From the capacity query (empty without one).
    pub capacities: Vec<Row>,
    /// From the tenant query (empty without one).
    pub tenants: Vec<TenantRow>,
    /// From the cell queries (empty without them): loads and capacities.
    pub cells: Vec<CellRow>,
    pub cell_capacities: Vec<CellRow>,
}

/// One cell's series: its layer, and its name and value in `row`.
#[derive(Debug, Clone, PartialEq)]
pub struct CellRow {
    pub layer: String,
    pub row: Row,
}

/// Each cell load of `loads` with its capacity in `capacities` (a cell with a load and no
/// capacity is refused naming it): (layer, cell, load, capacity).
fn pair_cells(
    loads: Vec<CellRow>,
    capacities: &[CellRow],
) -> Result<Vec<(String, String, f64, f64)>, FeedError> {
    loads
        .into_iter()
        .map(|c| {
            let capacity = capacities
                .iter()
                .find(|k| k.layer == c.layer && k.row.name == c.row.name)
                .map(|k| k.row.value)
                .ok_or_else(|| FeedError::BadValue {
                    field: format!("cells.{}.{}.capacity", c.layer, c.row.name),
                    problem: "none: the cell capacity query has no series for it".into(),
                })?;
            Ok((c.layer, c.row.name, c.row.value, capacity))
        })
        .collect()
}

/// Turns fetched rows into feed entries: each load paired with its capacity (the capacity
/// query's, else the topology's); time = the oldest sample's. A configured region or site with
/// a load but no capacity anywhere is refused by name; every other fault is left for
/// [`check_entries`].
pub fn assemble(
    fetched: Fetched,
    topology: &Capacities,
    now: SystemTime,
) -> Result<FeedEntries, FeedError> {
    let queried: BTreeMap<&str, f64> = fetched
        .capacities
        .iter()
        .map(|r| (r.name.as_str(), r.value))
        .collect();
    let oldest = fetched
        .regions
        .iter()
        .chain(&fetched.fallback)
        .map(|r| r.time)
        .fold(f64::INFINITY, f64::min);
    let time = if oldest.is_finite() && oldest >= 0.0 {
        SystemTime::UNIX_EPOCH + Duration::from_secs_f64(oldest)
    } else {
        now
    };
    let pair = |section: &str,
                rows: Vec<Row>,
                configured: &BTreeMap<String, Option<f64>>|
     -> Result<Vec<(String, f64, f64)>, FeedError> {
        rows.into_iter()
            .map(|row| {
                let capacity = match (queried.get(row.name.as_str()), configured.get(&row.name)) {
                    (Some(c), _) | (None, Some(Some(c))) => *c,
                    (None, Some(None)) => {
                        return Err(FeedError::BadValue {
                            field: format!("{section}.{}.capacity", row.name),
                            problem: "none: the capacity query has no series for it and \
                                      [topology] gives none"
                                .into(),
                        })
                    }
                    // Not configured: NaN, for check_entries to refuse by name.
                    (None, None) => f64::NAN,
                };
                Ok((row.name, row.value, capacity))
            })
            .collect()
    };
    Ok(FeedEntries {
        time,
        regions: pair("regions", fetched.regions, &topology.regions)?,
        fallback: pair("fallback", fetched.fallback, &topology.sites)?,
        tenants: fetched
            .tenants
            .into_iter()
            .map(|t| (t.tenant, t.row.name, t.row.value))
            .collect(),
        cells: pair_cells(fetched.cells, &fetched.cell_capacities)?,
    })
}

/// Runs the configured queries once.
fn fetch(config: &PrometheusConfig) -> Result<Fetched, String> {
    let base = parse_base_url(&config.url)?;
    let tls = match base.scheme {
        crate::http_client::Scheme::Https => Some(tls_config(config.ca_file.as_deref())?),
        crate::http_client::Scheme::Http => None,
    };
    let timeout = Duration::from_millis(config.timeout_ms);
    // One instant query: the answer's status and body.
    let get = |promql: &str| -> Result<(u16, String), String> {
        let path = format!("/api/v1/query?query={}", encode_query_value(promql));
        let request = Request {
            method: "GET",
            path: &path,
            headers: &[],
            body: b"",
        };
        let response = request_url(&base, tls.as_ref(), request, timeout, MAX_RESPONSE)
            .map_err(|e| e.to_string())?;
        Ok((response.status, response.body))
    };
    let query = |promql: &str| -> Result<Vec<Row>, String> {
        let (status, body) = get(promql)?;
        parse_vector(status, &body, &config.label)
    };
    let regions = query(&config.region_query).map_err(|e| format!("region_query: {e}"))?;
    let fallback = match &config.fallback_query {
        Some(q) => query(q).map_err(|e| format!("fallback_query: {e}"))?,
        None => Vec::new(),
    };
    let capacities = match &config.capacity_query {
        Some(q) => query(q).map_err(|e| format!("capacity_query: {e}"))?,
        None => Vec::new(),
    };
    let tenants = match &config.tenant_query {
        Some(q) => get(q)
            .and_then(|(status, body)| {
                parse_tenant_vector(status, &body, &config.tenant_label, &config.label)
            })
            .map_err(|e| format!("tenant_query: {e}"))?,
        None => Vec::new(),
    };
    let cell_query = |promql: &Option<String>, field: &str| -> Result<Vec<CellRow>, String> {
        let Some(q) = promql else {
            return Ok(Vec::new());
        };
        let (status, body) = get(q).map_err(|e| format!("{field}: {e}"))?;
        let rows = parse_tenant_vector(status, &body, &config.cell_layer_label, &config.cell_label)
            .map_err(|e| format!("{field}: {e}"))?;
        Ok(rows
            .into_iter()
            .map(|t| CellRow {
                layer: t.tenant,
                row: t.row,
            })
            .collect())
    };
    Ok(Fetched {
        regions,
        fallback,
        capacities,
        tenants,
        cells: cell_query(&config.cell_query, "cell_query")?,
        cell_capacities: cell_query(&config.cell_capacity_query, "cell_capacity_query")?,
    })
}

/// The source the shield loop polls; the queries run on its worker thread.
pub struct PrometheusSource {
    config: PrometheusConfig,
    capacities: Capacities,
    jobs: Sender<()>,
    results: Receiver<Result<Fetched, String>>,
    in_flight: bool,
    last_sent: Option<Instant>,
    /// The last failure reported, so a lasting one is counted once.
    last_failure: Option<String>,
}

impl PrometheusSource {
    /// Starts the worker thread (it ends when the source is dropped).
    pub fn new(
        config: PrometheusConfig,
        capacities: Capacities,
    ) -> std::io::Result<PrometheusSource> {
        let (jobs, job_rx) = mpsc::channel::<()>();
        let (result_tx, results) = mpsc::channel();
        let worker_config = config.clone();
        std::thread::Builder::new()
            .name("prometheus".into())
            .spawn(move || {
                while job_rx.recv().is_ok() {
                    if result_tx.send(fetch(&worker_config)).is_err() {
                        break;
                    }
                }
            })?;
        Ok(PrometheusSource {
            config,
            capacities,
            jobs,
            results,
            in_flight: false,
            last_sent: None,
            last_failure: None,
        })
    }

    /// Whether this source was built from `config` and `capacities` (else the loop rebuilds it).
    pub fn is_for(&self, config: &PrometheusConfig, capacities: &Capacities) -> bool {
        &self.config == config && &self.capacities == capacities
    }

    fn origin() -> FeedOrigin {
        FeedOrigin::Other("prometheus".into())
    }
}

impl LoadSource for PrometheusSource {
    fn name(&self) -> String {
        format!("prometheus {}", self.config.url)
    }

    fn leader_only(&self) -> bool {
        true
    }

    fn poll(&mut self, slot: &FeedSlot, names: &FeedNames<'_>, now: SystemTime) {
        match self.results.try_recv() {
            Ok(outcome) => {
                self.in_flight = false;
                let checked = outcome
                    .map_err(|reason| FeedError::Unreadable {
                        what: format!("prometheus {}", self.config.url),
                        reason,
                    })
                    .and_then(|fetched| assemble(fetched, &self.capacities, now))
                    .and_then(|entries| check_entries(entries, names, now));
                match checked {
                    Ok(feed) => {
                        self.last_failure = None;
                        let _ = slot.offer_checked(Ok(feed), Self::origin(), now);
                    }
                    Err(error) => {
                        let reason = error.to_string();
                        if self.last_failure.as_ref() != Some(&reason) {
                            slot.refuse(Self::origin(), &error, now);
                            self.last_failure = Some(reason);
                        }
                    }
                }
            }
            Err(TryRecvError::Empty) => {}
            Err(TryRecvError::Disconnected) => self.in_flight = false,
        }
        let due = self
            .last_sent
            .is_none_or(|t| t.elapsed() >= Duration::from_millis(self.config.interval_ms));
        if due && !self.in_flight && self.jobs.send(()).is_ok() {
            self.in_flight = true;
            self.last_sent = Some(Instant::now());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REGIONS: &[&str] = &["eu-west", "na-east"];
    const SITES: &[&str] = &["fb-eu"];
    const KNOWN: FeedNames<'static> = FeedNames {
        regions: REGIONS,
        sites: SITES,
        cells: &[],
    };

    fn now() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_796_032_800)
    }

    fn topology() -> Capacities {
        Capacities {
            regions: [
                ("eu-west".into(), Some(1000.0)),
                ("na-east".into(), Some(800.0)),
            ]
            .into(),
            sites: [("fb-eu".into(), Some(2000.0))].into(),
        }
    }

    fn vector(series: &[(&str, &str)]) -> String {
        let result: Vec<_> = series
            .iter()
            .map(|(name, value)| {
                serde_json::json!({"metric": {"region": name, "job": "edge"},
                                   "value": [1_796_032_799.5, value]})
            })
            .collect();
        serde_json::json!({"status": "success",
                           "data": {"resultType": "vector", "result": result}})
        .to_string()
    }

    fn rows(series: &[(&str, &str)]) -> Vec<Row> {
        parse_vector(200, &vector(series), "region").unwrap()
    }

    fn check(regions: Vec<Row>) -> Result<super::super::feed::LoadFeed, FeedError> {
        let fetched = Fetched {
            regions,
            fallback: rows(&[("fb-eu", "100")]),
            capacities: Vec::new(),
            tenants: Vec::new(),
            cells: Vec::new(),
            cell_capacities: Vec::new(),
        };
        let entries = assemble(fetched, &topology(), now())?;
        check_entries(entries, &KNOWN, now())
    }

    #[test]
    fn a_vector_becomes_a_feed_with_topology_capacities() {
        let feed = check(rows(&[("eu-west", "950"), ("na-east", "400")])).unwrap();
        assert_eq!(feed.regions["eu-west"].load, 950.0);
        assert_eq!(feed.regions["eu-west"].capacity, 1000.0);
        assert_eq!(feed.regions["na-east"].capacity, 800.0);
        assert_eq!(feed.fallback["fb-eu"].capacity, 2000.0);
        assert_eq!(
            feed.time,
            SystemTime::UNIX_EPOCH + Duration::from_secs_f64(1_796_032_799.5)
        );
    }

    #[test]
    fn the_capacity_query_wins_over_the_topology() {
        let fetched = Fetched {
            regions: rows(&[("eu-west", "950")]),
            fallback: Vec::new(),
            capacities: rows(&[("eu-west", "5000")]),
            tenants: Vec::new(),
            cells: Vec::new(),
            cell_capacities: Vec::new(),
        };
        let entries = assemble(fetched, &topology(), now()).unwrap();
        assert_eq!(entries.regions, vec![("eu-west".into(), 950.0, 5000.0)]);
    }

    #[test]
    fn bad_results_are_refused_by_the_feed_checks_with_the_reason() {
        let unknown = check(rows(&[("mars", "1")])).unwrap_err();
        assert!(
            unknown
                .to_string()
                .starts_with("regions.mars: unknown region"),
            "{unknown}"
        );
        let nan = check(rows(&[("eu-west", "NaN")])).unwrap_err();
        assert_eq!(
            nan.to_string(),
            "regions.eu-west.load: must be ≥ 0 (got NaN)"
        );
        let inf = check(rows(&[("eu-west", "+Inf")])).unwrap_err();
        assert_eq!(
            inf.to_string(),
            "regions.eu-west.load: must be ≥ 0 (got inf)"
        );
        let negative = check(rows(&[("eu-west", "-3")])).unwrap_err();
        assert_eq!(
            negative.to_string(),
            "regions.eu-west.load: must be ≥ 0 (got -3)"
        );
        let absurd = check(rows(&[("eu-west", "1e9")])).unwrap_err();
        assert!(
            absurd.to_string().contains("more than 100 × capacity"),
            "{absurd}"
        );
        let twice = check(rows(&[("eu-west", "1"), ("eu-west", "2")])).unwrap_err();
        assert_eq!(twice.to_string(), "regions.eu-west: appears twice");
        let empty = check_entries(
            assemble(
                Fetched {
                    regions: Vec::new(),
                    fallback: Vec::new(),
                    capacities: Vec::new(),
                    tenants: Vec::new(),
                    cells: Vec::new(),
                    cell_capacities: Vec::new(),
                },
                &topology(),
                now(),
            )
            .unwrap(),
            &KNOWN,
            now(),
        )
        .unwrap_err();
        assert_eq!(empty, FeedError::Empty);
    }

    #[test]
    fn a_configured_name_without_any_capacity_is_refused_by_name() {
        let mut topology = topology();
        topology.regions.insert("na-east".into(), None);
        let error = assemble(
            Fetched {
                regions: rows(&[("na-east", "1")]),
                fallback: Vec::new(),
                capacities: Vec::new(),
                tenants: Vec::new(),
                cells: Vec::new(),
                cell_capacities: Vec::new(),
            },
            &topology,
            now(),
        )
        .unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("regions.na-east.capacity: none"),
            "{error}"
        );
    }

    #[test]
    fn prometheus_errors_and_odd_answers_say_what_is_wrong() {
        let error = parse_vector(
            400,
            r#"{"status":"error","errorType":"bad_data","error":"parse error at char 3"}"#,
            "region",
        )
        .unwrap_err();
        assert_eq!(error, "HTTP 400, bad_data: parse error at char 3");
        let scalar = parse_vector(
            200,
            r#"{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}"#,
            "region",
        )
        .unwrap_err();
        assert!(scalar.contains("gave a scalar"), "{scalar}");
        let unlabelled = parse_vector(200, &vector(&[("eu-west", "1")]), "site").unwrap_err();
        assert!(unlabelled.contains("no label \"site\""), "{unlabelled}");
        assert!(parse_vector(502, "<html>bad gateway</html>", "region")
            .unwrap_err()
            .starts_with("HTTP 502, not a Prometheus API answer"));
    }

    #[test]
    fn urls_and_settings_are_checked() {
        let config = PrometheusConfig {
            url: "ftp://127.0.0.1:9090".into(),
            ca_file: None,
            region_query: "load".into(),
            fallback_query: None,
            capacity_query: Some(" ".into()),
            label: "region".into(),
            tenant_query: None,
            tenant_label: "tenant".into(),
            cell_query: None,
            cell_capacity_query: None,
            cell_layer_label: "layer".into(),
            cell_label: "cell".into(),
            interval_ms: 1000,
            timeout_ms: 1000,
        };
        assert_eq!(config.problem().map(|p| p.0), Some("shield.prometheus.url"));
        let config = PrometheusConfig {
            url: "https://127.0.0.1:9090".into(),
            ..config
        };
        assert_eq!(
            config.problem().map(|p| p.0),
            Some("shield.prometheus.capacity_query")
        );
        let bad_label = PrometheusConfig {
            label: "re-gion".into(),
            capacity_query: None,
            ..config.clone()
        };
        assert_eq!(
            bad_label.problem().map(|p| p.0),
            Some("shield.prometheus.label")
        );
        let fine = PrometheusConfig {
            capacity_query: None,
            ..config
        };
        assert_eq!(fine.problem(), None);
    }

    #[test]
    fn an_unreachable_prometheus_is_one_refusal_until_the_reason_changes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let config = PrometheusConfig {
            url: format!("http://{addr}"),
            ca_file: None,
            region_query: "load".into(),
            fallback_query: None,
            capacity_query: None,
            label: "region".into(),
            tenant_query: None,
            tenant_label: "tenant".into(),
            cell_query: None,
            cell_capacity_query: None,
            cell_layer_label: "layer".into(),
            cell_label: "cell".into(),
            interval_ms: 100,
            timeout_ms: 500,
        };
        let mut source = PrometheusSource::new(config, topology()).unwrap();
        let slot = FeedSlot::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Several rounds of queries, each failing the same way.
        let mut rounds = 0;
        while rounds < 3 {
            source.poll(&slot, &KNOWN, now());
            if !source.in_flight {
                rounds += 1;
            }
            assert!(Instant::now() < deadline, "the worker never answered");
            std::thread::sleep(Duration::from_millis(20));
        }
        let stats = slot.stats();
        assert_eq!(stats.refused, 1, "{stats:?}");
        assert_eq!(stats.accepted, 0);
        let refusal = stats.last_refusal.unwrap();
        assert_eq!(refusal.origin, FeedOrigin::Other("prometheus".into()));
        assert!(
            refusal.reason.contains("cannot connect"),
            "{}",
            refusal.reason
        );
        assert!(slot.latest().is_none());
    }

    #[test]
    fn the_tenant_query_gives_the_feed_its_tenant_figures() {
        let answer = serde_json::json!({"status": "success", "data": {"resultType": "vector",
            "result": [
                {"metric": {"tenant": "contoso", "region": "eu-west"},
                 "value": [1_796_032_799.5, "600"]},
                {"metric": {"region": "eu-west"}, "value": [1_796_032_799.5, "1"]}]}})
        .to_string();
        let missing = parse_tenant_vector(200, &answer, "tenant", "region");
        assert!(
            missing
                .as_ref()
                .is_err_and(|e| e.contains("no label \"tenant\"")),
            "{missing:?}"
        );
        let answer = answer.replace(
            r#"{"region":"eu-west"}"#,
            r#"{"tenant":"x","region":"eu-west"}"#,
        );
        let tenants = parse_tenant_vector(200, &answer, "tenant", "region").unwrap();
        let fetched = Fetched {
            regions: rows(&[("eu-west", "950")]),
            fallback: Vec::new(),
            capacities: Vec::new(),
            tenants,
            cells: Vec::new(),
            cell_capacities: Vec::new(),
        };
        let entries = assemble(fetched, &topology(), now()).unwrap();
        let feed = check_entries(entries, &KNOWN, now()).unwrap();
        assert_eq!(feed.tenants["contoso"]["eu-west"], 600.0);
        assert_eq!(feed.tenants["x"]["eu-west"], 1.0);
    }
}
