//! Practice drills (`[[drills]]`): a real shift (a share of a profile moved to its alternate, a
//! region drained, the fallback forced for one region) made through the operators' own path
//! (`crate::change::edit_file`: the safety rules, the taste), held for its duration while the
//! runner checks that the server answers as the drill's control version predicts, and
//! reverted at the end or at the first failed check.
//!
//! Owns running one drill ([`run`]) and its record ([`log`]). The runner asks the server itself
//! over DNS (UDP on loopback, with ECS for each sample subnet) and its admin endpoint
//! (`/v1/status`, `/metrics`); the expected answers come from the same loader and answer path
//! the server runs (`Snapshot::standalone` + `answer::respond`), for the version before the
//! drill and for the drill's version. Times measured: write of the change → every sample
//! subnet served the new way, and write of the revert → every one served as before (ms).
//! Used by `steerdns drill run` and by the server's schedule ([`schedule`]). Where the change
//! and the revert are written is a [`Writer`]: the control file on a single node
//! ([`FileWriter`]), or in fleet mode the CLI's etcd edit path (safety rules, rollouts), whose
//! writer also waits until every node's admin endpoint says it serves the version written, so
//! that the times measured are change → served on every node and revert → served on every node.
//! The schedule drills single nodes only.

pub mod log;
pub mod schedule;

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use hickory_proto::op::{Edns, Message, ResponseCode};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RecordType};
use ipnet::IpNet;

use crate::change::{edit_file, ChangeError, OverrideRequest};
use crate::config::drill::{DrillAction, DrillConfig};
use crate::config::Config;
use crate::control::edit::{set_drain, set_force, set_weights, ControlLock, EditError};
use crate::control::ControlFile;
use crate::dns::wire::{Requester, Transport, MAX_MESSAGE};
use crate::snapshot::load::{load_with, ControlSource};
use crate::snapshot::Snapshot;

pub use log::DrillRun;

/// Where the runner reaches the server.
#[derive(Debug, Clone, Copy)]
pub struct Endpoints {
    pub admin: SocketAddr,
    pub dns: SocketAddr,
}

/// Why a drill could not even be attempted (nothing recorded).
#[derive(Debug, thiserror::Error)]
pub enum DrillError {
    #[error("no drill named {name:?} (configured: {configured})")]
    Unknown { name: String, configured: String },
    #[error("drills need a control file ([control] file)")]
    NoControlFile,
    #[error("the drill schedule runs on a single node only; in fleet mode run drills with `steerdns drill run NAME`")]
    FleetSchedule,
    #[error("drill log {path}: {problem}")]
    Log { path: PathBuf, problem: String },
}

/// Why the write of a drill's change or revert did not land.
#[derive(Debug)]
pub enum WriteFailure {
    /// The safety rules or the taster refused it: nothing written.
    Refused(String),
    /// Anything else: I/O, etcd, a rollout that halted.
    Failed(String),
}

/// Where a drill writes its change and its revert: the operators' own path.
pub trait Writer {
    /// What the drill's log and messages call the place written (a file, the fleet's state).
    fn place(&self) -> String;
    /// The control text in force now.
    fn current(&mut self) -> Result<String, String>;
    /// Writes `edit` of the text in force (screened with `overrides`, recorded as by `by`).
    fn write(
        &mut self,
        what: &str,
        by: &str,
        overrides: &[OverrideRequest],
        edit: &dyn Fn(&str) -> Result<String, EditError>,
    ) -> Result<(), WriteFailure>;
    /// Waits (at most `limit`) until every node serves the version last written; the nodes.
    /// A single node has none to wait for: the runner's DNS check is its proof.
    fn wait_every_node(&mut self, limit: Duration) -> Result<Vec<String>, String>;
}

/// A single node's control file, written by [`edit_file`] (the lock, safety rules, taste) with
/// a serial above everything recorded and served.
pub struct FileWriter<'a> {
    config: &'a Config,
    admin: SocketAddr,
    floor: Option<u64>,
}

impl<'a> FileWriter<'a> {
    pub fn new(config: &'a Config, admin: SocketAddr) -> FileWriter<'a> {
        FileWriter {
            config,
            admin,
            floor: None,
        }
    }

    /// The serial the server serves (asked once) or the history recorded, the higher.
    fn floor(&mut self) -> u64 {
        let admin = self.admin;
        let config = self.config;
        *self.floor.get_or_insert_with(|| {
            let served = get(admin, "/v1/status")
                .ok()
                .and_then(|b| serde_json::from_str::<serde_json::Value>(&b).ok())
                .and_then(|s| s["serial"].as_u64())
                .unwrap_or(0);
            served.max(crate::change::recorded_floor(config))
        })
    }
}

impl Writer for FileWriter<'_> {
    fn place(&self) -> String {
        self.config
            .control
            .file
            .as_ref()
            .map_or("the control file".into(), |p| p.display().to_string())
    }

    fn current(&mut self) -> Result<String, String> {
        let path = self.config.control.file.as_ref().ok_or("no control file")?;
        crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))
    }

    fn write(
        &mut self,
        _what: &str,
        by: &str,
        overrides: &[OverrideRequest],
        edit: &dyn Fn(&str) -> Result<String, EditError>,
    ) -> Result<(), WriteFailure> {
        let floor = self.floor();
        match edit_file(self.config, floor, None, overrides, by, edit) {
            Ok(_) => Ok(()),
            Err(e @ ChangeError::Refused(_)) | Err(e @ ChangeError::Invalid(_)) => {
                Err(WriteFailure::Refused(e.to_string()))
            }
            Err(e) => Err(WriteFailure::Failed(e.to_string())),
        }
    }

    fn wait_every_node(&mut self, _limit: Duration) -> Result<Vec<String>, String> {
        Ok(Vec::new())
    }
}

/// The answer a sample subnet gets: rcode and the answer records without their TTLs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    rcode: String,
    records: Vec<String>,
}

impl Answer {
    fn of(message: &Message) -> Answer {
        let mut records: Vec<String> = message
            .answers
            .iter()
            .map(|r| format!("{} {} {}", r.name, r.record_type(), r.data))
            .collect();
        records.sort();
        Answer {
            rcode: format!("{:?}", message.metadata.response_code),
            records,
        }
    }

    fn serves(&self) -> bool {
        self.rcode == format!("{:?}", ResponseCode::NoError) && !self.records.is_empty()
    }
}

/// A failed step of a drill: what the record says.
type Failed = String;

/// Runs drill `name` now and records it in the drill log; `progress` hears each step. A run
/// that a pre-check blocks changes nothing (result `blocked`); a failed check reverts at once
/// (result `failed`, which raises an alert until the drill passes again).
pub fn run(
    config: &Config,
    name: &str,
    at: Endpoints,
    trigger: &str,
    progress: &mut dyn FnMut(&str),
) -> Result<DrillRun, DrillError> {
    if config.fleet.is_some() {
        return Err(DrillError::FleetSchedule);
    }
    let mut writer = FileWriter::new(config, at.admin);
    run_with(config, name, at, trigger, &mut writer, progress)
}

/// [`run`], the change and the revert written by `writer`.
pub fn run_with(
    config: &Config,
    name: &str,
    at: Endpoints,
    trigger: &str,
    writer: &mut dyn Writer,
    progress: &mut dyn FnMut(&str),
) -> Result<DrillRun, DrillError> {
    let drill = config
        .drills
        .iter()
        .find(|d| d.name == name)
        .ok_or_else(|| DrillError::Unknown {
            name: name.to_owned(),
            configured: config
                .drills
                .iter()
                .map(|d| d.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        })?;
    let log_path = log::path(config).ok_or(DrillError::NoControlFile)?;
    let mut record = DrillRun::new(drill, trigger);
    let outcome = match ControlLock::acquire(&log_path, LOCK_WAIT) {
        Ok(_lock) => Runner {
            config,
            drill,
            at,
            writer,
            progress,
        }
        .run(&mut record),
        Err(_) => Err(Blocked("another drill is in progress".into())),
    };
    match outcome {
        Ok(()) => record.result = "passed".into(),
        Err(Blocked(reason)) => {
            record.result = "blocked".into();
            record.reason = Some(reason);
        }
        Err(Fail(reason)) => {
            record.result = "failed".into();
            record.reason = Some(reason);
        }
    }
    log::append(&log_path, &record).map_err(|problem| DrillError::Log {
        path: log_path.clone(),
        problem,
    })?;
    Ok(record)
}

/// How long a drill waits for the drill lock (a status probe holds it for microseconds;
/// another drill holds it for its whole run).
const LOCK_WAIT: Duration = Duration::from_millis(300);

/// How a run ended short of passing.
enum Stop {
    /// A pre-check: nothing was changed.
    Blocked(String),
    /// After the change (reverted, or the change itself was refused).
    Fail(Failed),
}
use Stop::{Blocked, Fail};

struct Runner<'a> {
    config: &'a Config,
    drill: &'a DrillConfig,
    at: Endpoints,
    writer: &'a mut dyn Writer,
    progress: &'a mut dyn FnMut(&str),
}

impl<'a> Runner<'a> {
    fn plan(&self) -> Plan<'a> {
        Plan {
            config: self.config,
            drill: self.drill,
        }
    }

    fn run(&mut self, record: &mut DrillRun) -> Result<(), Stop> {
        let control_path = self.config.control.file.clone().unwrap_or_default();
        let before_text = self.writer.current().map_err(Blocked)?;
        let status = self.status().map_err(Blocked)?;
        self.pre_checks(&status)?;
        let before =
            ControlFile::parse(&before_text, &control_path).map_err(|e| Blocked(e.to_string()))?;
        let drill_text = self
            .plan()
            .apply(&before_text, &before)
            .map_err(|e| Blocked(e.to_string()))?;
        let expected_before = self.predict(&control_path, &before_text).map_err(Blocked)?;
        let expected_during = self.predict(&control_path, &drill_text).map_err(Blocked)?;
        if expected_before == expected_during {
            return Err(Blocked(
                "the drill's change would not change any sample subnet's answer".into(),
            ));
        }
        if let Some((subnet, answer)) = self
            .drill
            .subnets
            .iter()
            .zip(&expected_during)
            .find(|(_, a)| !a.serves())
        {
            return Err(Blocked(format!(
                "the destination does not answer {subnet}: {} {:?}",
                answer.rcode, answer.records
            )));
        }
        let observed = self.observe().map_err(Blocked)?;
        if observed != expected_before {
            return Err(Blocked(
                "the server does not answer as its control file says (before the drill)".into(),
            ));
        }
        let servfail_before = self.servfail().map_err(Blocked)?;
        (self.progress)(&format!(
            "drill {}: checks before passed; changing",
            self.drill.name
        ));

        let started = Instant::now();
        let by = format!("drill {} ({})", self.drill.name, record.trigger);
        let what = format!("drill {}", self.drill.name);
        let plan = self.plan();
        let change = self.writer.write(&what, &by, &[], &|text| {
            let now = ControlFile::parse(text, &control_path)?;
            plan.apply(text, &now)
        });
        match change {
            Ok(()) => {}
            Err(WriteFailure::Refused(e)) => {
                return Err(Fail(format!("the drill's change was refused: {e}")))
            }
            Err(WriteFailure::Failed(e)) => {
                return Err(Fail(format!("the drill's change was not written: {e}")))
            }
        }
        let during = match self.wait_everywhere(&expected_during, started) {
            Ok((ms, nodes)) => {
                record.change_to_served_ms = Some(ms);
                record.nodes = nodes;
                (self.progress)(&format!(
                    "drill {}: change served in {ms:.0} ms; holding {} s",
                    self.drill.name, self.drill.duration_secs
                ));
                self.hold(&expected_during, &servfail_before, record)
            }
            Err(e) => Err(e),
        };
        let revert_started = Instant::now();
        let reverted = self
            .revert(&before, &what, &by)
            .and_then(|()| self.wait_everywhere(&expected_before, revert_started));
        match &reverted {
            Ok((ms, _)) => {
                record.revert_to_served_ms = Some(*ms);
                (self.progress)(&format!(
                    "drill {}: reverted, served in {ms:.0} ms",
                    self.drill.name
                ));
            }
            Err(e) => (self.progress)(&format!("drill {}: revert: {e}", self.drill.name)),
        }
        match (during, reverted) {
            (Ok(()), Ok(_)) => Ok(()),
            (Err(e), Ok(_)) => Err(Fail(e)),
            (Ok(()), Err(r)) => Err(Fail(format!("revert: {r}"))),
            (Err(e), Err(r)) => Err(Fail(format!("{e}; revert: {r}"))),
        }
    }

    fn status(&self) -> Result<serde_json::Value, String> {
        let body = get(self.at.admin, "/v1/status")?;
        serde_json::from_str(&body).map_err(|e| format!("/v1/status: {e}"))
    }

    /// No alert (shield, health, another drill's failure) and no open rollout.
    fn pre_checks(&self, status: &serde_json::Value) -> Result<(), Stop> {
        let shield = &status["shield"];
        let no_sources = shield["sources"].as_array().is_none_or(|s| s.is_empty());
        for alert in shield["alerts"].as_array().into_iter().flatten() {
            let alert = alert.as_str().unwrap_or("");
            // Without any load source configured, "no feed yet" says nothing about an incident.
            if no_sources && alert == "no load feed received yet" {
                continue;
            }
            return Err(Blocked(format!("alert standing: shield: {alert}")));
        }
        for target in status["health"]["targets"].as_array().into_iter().flatten() {
            if target["state"] == "down" {
                return Err(Blocked(format!(
                    "alert standing: health target {} is down",
                    target["target"]
                )));
            }
        }
        for alert in status["drills"]["alerts"].as_array().into_iter().flatten() {
            let alert = alert.as_str().unwrap_or("");
            if !alert.starts_with(&format!("drill {} ", self.drill.name)) {
                return Err(Blocked(format!("alert standing: {alert}")));
            }
        }
        let rollout = &status["fleet"]["rollout"];
        if let Some(phase) = rollout["phase"].as_str() {
            if matches!(phase, "running" | "halted") {
                return Err(Blocked(format!(
                    "a rollout is in progress: the rollout of control revision {} is {phase} \
                     ({} of {} waves released); drill when it completes or is aborted",
                    rollout["candidate"], rollout["released"], rollout["waves"]
                )));
            }
        }
        self.destination_healthy(status).map_err(Blocked)
    }

    /// A shift's destination endpoint is served (its monitor, if any, says up).
    fn destination_healthy(&self, status: &serde_json::Value) -> Result<(), String> {
        let (Some(profile), Some(to)) = (&self.drill.profile, &self.drill.to) else {
            return Ok(());
        };
        for e in status["health"]["endpoints"]
            .as_array()
            .into_iter()
            .flatten()
        {
            if e["profile"] == profile.as_str()
                && e["endpoint"] == to.as_str()
                && e["served"] == false
            {
                return Err(format!(
                    "destination {profile}/{to} is not healthy ({})",
                    e["state"]
                ));
            }
        }
        Ok(())
    }

    /// Puts the drill's knobs back as they were in `before`, keeping every other change made
    /// meanwhile; let through every safety rule (a revert must never be held back), each
    /// override recorded.
    fn revert(&mut self, before: &ControlFile, what: &str, by: &str) -> Result<(), Failed> {
        let d = self.drill;
        let overrides: Vec<OverrideRequest> = self
            .config
            .safety
            .rules
            .iter()
            .map(|r| OverrideRequest {
                rule: r.id.clone(),
                reason: format!("revert of drill {}", d.name),
            })
            .collect();
        let plan = self.plan();
        let revert = |text: &str| match d.action {
            DrillAction::Shift => {
                let (profile, from, to) = shift_names(d);
                let pairs = [
                    (from.to_owned(), plan.weight(before, profile, from)),
                    (to.to_owned(), plan.weight(before, profile, to)),
                ];
                set_weights(text, profile, &pairs)
            }
            DrillAction::Drain => set_drain(text, d.region.as_deref().unwrap_or_default(), false),
            DrillAction::Fallback => set_force(text, d.region.as_deref().unwrap_or_default(), None),
        };
        let place = self.writer.place();
        let result = self
            .writer
            .write(&format!("revert of {what}"), by, &overrides, &revert);
        result.map_err(|e| {
            let (WriteFailure::Refused(e) | WriteFailure::Failed(e)) = e;
            format!("REVERT FAILED, the drill's change is still in {place}: {e}")
        })
    }

    /// The answers the server's own loader and answer path give each sample subnet with
    /// control text `text`.
    fn predict(&self, path: &std::path::Path, text: &str) -> Result<Vec<Answer>, String> {
        let loaded = load_with(self.config, ControlSource::Text { path, text }).map_err(|p| {
            format!(
                "the drill's control version does not load: {}",
                p.join("; ")
            )
        })?;
        let snapshot = Snapshot::standalone(loaded.compiled);
        let client = Requester::new(IpAddr::V4(Ipv4Addr::LOCALHOST), Transport::Udp);
        let mut out = vec![0u8; MAX_MESSAGE];
        self.drill
            .subnets
            .iter()
            .map(|subnet| {
                let packet = self.query(0x4452, subnet)?;
                let len = crate::answer::respond(&snapshot, &packet, &client, &mut out)
                    .ok_or_else(|| format!("no answer predicted for {subnet}"))?;
                let message = Message::from_vec(&out[..len]).map_err(|e| e.to_string())?;
                Ok(Answer::of(&message))
            })
            .collect()
    }

    fn query(&self, id: u16, subnet: &IpNet) -> Result<Vec<u8>, String> {
        let name = Name::from_ascii(&self.drill.query).map_err(|e| e.to_string())?;
        let rtype = if self.drill.qtype == "AAAA" {
            RecordType::AAAA
        } else {
            RecordType::A
        };
        let mut message = Message::query();
        message.metadata.id = id;
        message.add_query(hickory_proto::op::Query::query(name, rtype));
        let mut edns = Edns::new();
        edns.set_max_payload(1232);
        edns.options_mut()
            .insert(EdnsOption::Subnet(ClientSubnet::new(
                subnet.addr(),
                subnet.prefix_len(),
                0,
            )));
        message.set_edns(edns);
        message.to_vec().map_err(|e| e.to_string())
    }

    /// What the server answers each sample subnet now (over UDP).
    fn observe(&self) -> Result<Vec<Answer>, String> {
        let local: SocketAddr = if self.at.dns.is_ipv6() {
            "[::1]:0"
        } else {
            "127.0.0.1:0"
        }
        .parse()
        .map_err(|e| format!("{e}"))?;
        let socket = UdpSocket::bind(local).map_err(|e| format!("UDP socket: {e}"))?;
        socket
            .set_read_timeout(Some(Duration::from_millis(500)))
            .map_err(|e| e.to_string())?;
        let mut buffer = vec![0u8; MAX_MESSAGE];
        let mut answers = Vec::with_capacity(self.drill.subnets.len());
        for (i, subnet) in self.drill.subnets.iter().enumerate() {
            let id = 0x1000 + i as u16;
            answers.push(self.ask(&socket, id, subnet, &mut buffer)?);
        }
        Ok(answers)
    }

    /// One question, retried once on a lost datagram.
    fn ask(
        &self,
        socket: &UdpSocket,
        id: u16,
        subnet: &IpNet,
        buffer: &mut [u8],
    ) -> Result<Answer, String> {
        let packet = self.query(id, subnet)?;
        for _ in 0..2 {
            socket
                .send_to(&packet, self.at.dns)
                .map_err(|e| format!("DNS to {}: {e}", self.at.dns))?;
            let deadline = Instant::now() + Duration::from_millis(500);
            while Instant::now() < deadline {
                let Ok((len, from)) = socket.recv_from(buffer) else {
                    break;
                };
                if from != self.at.dns {
                    continue;
                }
                if let Ok(message) = Message::from_vec(&buffer[..len]) {
                    if message.metadata.id == id {
                        return Ok(Answer::of(&message));
                    }
                }
            }
        }
        Err(format!("no DNS answer from {} for {subnet}", self.at.dns))
    }

    /// Waits until every node serves what was just written (the writer asks them) and this
    /// node answers every sample subnet with `expected`; the time since `since` in ms, and
    /// the nodes.
    fn wait_everywhere(
        &mut self,
        expected: &[Answer],
        since: Instant,
    ) -> Result<(f64, Vec<String>), String> {
        let limit = Duration::from_millis(self.drill.serve_timeout_ms);
        let nodes = self.writer.wait_every_node(limit)?;
        Ok((self.wait_served(expected, since)?, nodes))
    }

    /// Waits until every sample subnet gets `expected`; the time since `since` in ms.
    fn wait_served(&self, expected: &[Answer], since: Instant) -> Result<f64, String> {
        let limit = Duration::from_millis(self.drill.serve_timeout_ms);
        loop {
            let observed = self.observe()?;
            if observed == expected {
                return Ok(since.elapsed().as_secs_f64() * 1000.0);
            }
            if since.elapsed() >= limit {
                let wrong = observed
                    .iter()
                    .zip(expected)
                    .filter(|(o, e)| o != e)
                    .count();
                return Err(format!(
                    "{wrong} of {} sample subnets not served as expected within {limit:?}",
                    expected.len()
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Holds the change for the drill's duration, checking answers, the destination's health
    /// and the SERVFAIL share every interval; the first failed check ends it.
    fn hold(
        &mut self,
        expected: &[Answer],
        servfail_before: &(u64, u64),
        record: &mut DrillRun,
    ) -> Result<(), Failed> {
        let held = Instant::now();
        let duration = Duration::from_secs(self.drill.duration_secs);
        let interval = Duration::from_millis(self.drill.check_interval_ms);
        while held.elapsed() < duration {
            std::thread::sleep(interval.min(duration.saturating_sub(held.elapsed())));
            record.checks += 1;
            let observed = self.observe()?;
            if observed != expected {
                let (i, answer) = observed
                    .iter()
                    .enumerate()
                    .find(|(i, o)| Some(*o) != expected.get(*i))
                    .unwrap_or((0, &observed[0]));
                return Err(format!(
                    "check {}: {} answered {} {:?}, expected {:?}",
                    record.checks,
                    self.drill.subnets[i],
                    answer.rcode,
                    answer.records,
                    expected.get(i).map(|e| &e.records)
                ));
            }
            let status = self.status()?;
            self.destination_healthy(&status)
                .map_err(|e| format!("check {}: {e}", record.checks))?;
            let now = self.servfail()?;
            let (f0, t0) = *servfail_before;
            let (df, dt) = (now.0.saturating_sub(f0), now.1.saturating_sub(t0));
            let before_share = if t0 == 0 { 0.0 } else { f0 as f64 / t0 as f64 };
            if dt > 0 {
                let share = df as f64 / dt as f64;
                if share > before_share + self.drill.max_servfail_increase {
                    return Err(format!(
                        "check {}: SERVFAIL share {:.1}% during the drill, {:.1}% before",
                        record.checks,
                        share * 100.0,
                        before_share * 100.0
                    ));
                }
            }
        }
        record.held_ms = Some(held.elapsed().as_secs_f64() * 1000.0);
        Ok(())
    }

    /// The server's SERVFAIL responses and all responses so far (from /metrics).
    fn servfail(&self) -> Result<(u64, u64), String> {
        let text = get(self.at.admin, "/metrics")?;
        let (mut servfail, mut total) = (0u64, 0u64);
        for line in text
            .lines()
            .filter(|l| l.starts_with("steerdns_responses_total{"))
        {
            let value = line
                .rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(0.0) as u64;
            total += value;
            if line.contains("rcode=\"SERVFAIL\"") {
                servfail += value;
            }
        }
        Ok((servfail, total))
    }
}

/// The drill's knobs: its change and the weights it moves (apart from the runner, so that
/// the writer's edit closures borrow only these).
#[derive(Clone, Copy)]
struct Plan<'a> {
    config: &'a Config,
    drill: &'a DrillConfig,
}

impl Plan<'_> {
    /// The drill's change applied to `text` (whose knobs are `now`).
    fn apply(&self, text: &str, now: &ControlFile) -> Result<String, EditError> {
        let d = self.drill;
        match d.action {
            DrillAction::Shift => {
                let (profile, from, to) = shift_names(d);
                let (wf, wt) = (
                    self.weight(now, profile, from),
                    self.weight(now, profile, to),
                );
                let total: u32 = self.total_weight(now, profile);
                let moved = (total * d.share.unwrap_or(0)).div_ceil(100).min(wf);
                if moved == 0 {
                    return Err(EditError::NoWeightToMove {
                        profile: profile.to_owned(),
                        endpoint: from.to_owned(),
                    });
                }
                set_weights(
                    text,
                    profile,
                    &[(from.to_owned(), wf - moved), (to.to_owned(), wt + moved)],
                )
            }
            DrillAction::Drain => {
                let region = d.region.as_deref().unwrap_or_default();
                if now.regions.get(region).is_some_and(|k| k.drain) {
                    return Err(EditError::DrainedAlready {
                        region: region.to_owned(),
                    });
                }
                set_drain(text, region, true)
            }
            DrillAction::Fallback => {
                let region = d.region.as_deref().unwrap_or_default();
                let force = format!("fallback:{}", d.site.as_deref().unwrap_or_default());
                if now
                    .regions
                    .get(region)
                    .and_then(|k| k.force.as_ref())
                    .is_some()
                {
                    return Err(EditError::ForcedAlready {
                        region: region.to_owned(),
                    });
                }
                set_force(text, region, Some(&force))
            }
        }
    }

    /// The endpoint's weight in `control` (else the config's).
    fn weight(&self, control: &ControlFile, profile: &str, endpoint: &str) -> u32 {
        control
            .profiles
            .get(profile)
            .and_then(|p| p.endpoints.get(endpoint))
            .and_then(|k| k.weight)
            .or_else(|| {
                self.config
                    .profiles
                    .get(profile)
                    .and_then(|p| p.endpoints.iter().find(|e| e.name == endpoint))
                    .and_then(|e| e.weight)
            })
            .unwrap_or(0)
    }

    fn total_weight(&self, control: &ControlFile, profile: &str) -> u32 {
        self.config.profiles.get(profile).map_or(0, |p| {
            p.endpoints
                .iter()
                .map(|e| self.weight(control, profile, &e.name))
                .sum()
        })
    }
}

fn shift_names(d: &DrillConfig) -> (&str, &str, &str) {
    (
        d.profile.as_deref().unwrap_or_default(),
        d.from.as_deref().unwrap_or_default(),
        d.to.as_deref().unwrap_or_default(),
    )
}

/// One GET to the admin endpoint; the body of a 200.
fn get(admin: SocketAddr, path: &str) -> Result<String, String> {
    let response = crate::http_client::request(
        &admin.to_string(),
        "GET",
        path,
        &[],
        b"",
        Duration::from_secs(5),
        8 << 20,
    )
    .map_err(|e| format!("admin endpoint {admin}{path}: {e}"))?;
    if response.status != 200 {
        return Err(format!(
            "admin endpoint {admin}{path}: HTTP {}",
            response.status
        ));
    }
    Ok(response.body)
}

/// Now, RFC 3339.
fn now_text() -> String {
    crate::rfc3339::format_utc(SystemTime::now())
}
