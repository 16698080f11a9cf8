//! A fleet fault drill that keeps running: a 3-member etcd cluster and 3 real nodes with staged
//! rollouts, and for a bounded time, at random (seeded, printed), one fault after another:
//! an etcd member killed and restarted, a node frozen (SIGSTOP … SIGCONT), a node killed and
//! restarted, garbage written to or keys deleted under the fleet's prefix (`nodes/`,
//! `rollout/`, `shield/`, `health/`), and a control version every taster refuses put straight
//! into etcd. Meanwhile a writer issues weight changes through the CLI (from any node's config)
//! and a reader asks every running node, over UDP, for the break-glass name and for
//! `CH TXT serial.steerdns`.
//!
//! Invariants:
//! - no answer from a running node is SERVFAIL or empty, whatever the faults;
//! - no node ever serves a serial that was never written, nor one its taster refused;
//! - no acknowledged write is lost: every serial the CLI reported written is in the fleet's
//!   history in etcd at the end (compare-and-swap never overwrites a version unseen);
//! - after the faults stop (every process running again, the garbage left in place), one more
//!   write is served by every node within [`CONVERGE_BOUND`].
//!
//! `FLEET_DRILL_SECS` (default 40) sets how long faults are injected, `FLEET_DRILL_SEED` the
//! seed; the counts are printed (run with `--nocapture` to see them).

use crate::control_common;
use crate::fleet_common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use control_common::*;
use fleet_common::*;
use hickory_proto::op::{Message, ResponseCode};
use hickory_proto::rr::{DNSClass, RData, RecordType};

/// After the last fault, how long the fleet may take to serve one more write everywhere.
const CONVERGE_BOUND: Duration = Duration::from_secs(45);
const PREFIX: &str = "/steerdns/drill";
const LEASE_TTL_SECS: u64 = 3;

/// A small generator (splitmix64): the drill's choices, reproducible from the printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from))
    }
}

/// What the reader may ask a node: its DNS address while it runs and is not frozen. `epoch`
/// changes with every fault on the node, so an answer that straddles one is not judged.
#[derive(Clone, Copy)]
struct Reachable {
    dns: Option<SocketAddr>,
    epoch: u64,
}

#[derive(Default)]
struct Observed {
    answers_checked: u64,
    /// Queries that got no answer at all from a running node after retries (reported).
    unanswered: u64,
    bad_answers: Vec<String>,
    served_serials: BTreeSet<u64>,
}

fn node_config(endpoints: &[String]) -> String {
    let etcd = endpoints
        .iter()
        .map(|e| format!("\"{e}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "[fleet]\netcd = [{etcd}]\nprefix = \"{PREFIX}\"\nlease_ttl_secs = {LEASE_TTL_SECS}\n\
         converge_timeout_secs = 3\ntimeout_ms = 1000\nhistory_keep = 10000\n\
         [fleet.rollout]\nwaves = [[\"ns1\"], [\"ns2\", \"ns3\"]]\nbake_secs = 1\n\
         wave_timeout_secs = 10\nprobes = [\"critical.example.com A\"]\n"
    )
}

/// One UDP exchange with up to 3 tries; `None` when nothing answered.
fn ask(server: SocketAddr, query: &Message) -> Option<Message> {
    let packet = query.to_vec().ok()?;
    (0..3).find_map(|_| {
        udp_once(server, &packet, Duration::from_millis(700))
            .and_then(|bytes| Message::from_vec(&bytes).ok())
            .filter(|m| m.metadata.id == query.metadata.id)
    })
}

fn chaos_serial_query() -> Message {
    let mut message = plain_query("serial.steerdns.", RecordType::TXT);
    message.queries[0].set_query_class(DNSClass::CH);
    message
}

/// The serial in a `CH TXT serial.steerdns` answer ("serial 12 ...").
fn serial_in(response: &Message) -> Option<u64> {
    response.answers.iter().find_map(|r| match &r.data {
        RData::TXT(txt) => txt
            .to_string()
            .strip_prefix("serial ")?
            .split_whitespace()
            .next()?
            .parse()
            .ok(),
        _ => None,
    })
}

/// Asks `dns` for the break-glass name (from one of `subnets`) and the served serial; records
/// what it saw unless the node's epoch moved meanwhile.
fn read_node(
    name: &str,
    before: Reachable,
    now: impl Fn() -> Reachable,
    subnet: &str,
    observed: &Mutex<Observed>,
) {
    let Some(dns) = before.dns else { return };
    let answer = ask(
        dns,
        &ecs_query("critical.example.com.", RecordType::A, subnet),
    );
    let serial = ask(dns, &chaos_serial_query());
    if now().epoch != before.epoch {
        return;
    }
    let mut seen = observed.lock().unwrap_or_else(|e| e.into_inner());
    let (Some(answer), Some(serial)) = (answer, serial) else {
        seen.unanswered += 1;
        return;
    };
    seen.answers_checked += 1;
    let code = answer.metadata.response_code;
    if code != ResponseCode::NoError || answer.answers.is_empty() {
        seen.bad_answers.push(format!(
            "{name}: critical.example.com from {subnet}: {code:?} with {} answers",
            answer.answers.len()
        ));
    }
    match serial_in(&serial) {
        Some(s) => {
            seen.served_serials.insert(s);
        }
        None => seen
            .bad_answers
            .push(format!("{name}: no serial in CH TXT: {serial:?}")),
    }
}

/// How long one CLI write may take: its etcd requests are bounded (`timeout_ms`) and it
/// follows a rollout for at most `converge_timeout_secs`, so a command still running after
/// this hangs (reported as a failure).
const CLI_BOUND: Duration = Duration::from_secs(30);

/// What one `weight set` did.
enum Write {
    /// The serial it reported written.
    Landed(u64),
    /// It said nothing was written (or failed before writing); what it printed.
    NotWritten(String),
    /// It ran longer than [`CLI_BOUND`] and was killed; what it printed so far.
    Hung(String),
}

/// `weight set` through `config` (the CLI talks to etcd).
fn write_weights(config: &std::path::Path, frontdoor: u32, emergency: bool) -> Write {
    let mut args = vec![
        "weight".to_string(),
        "set".into(),
        "critical".into(),
        format!("frontdoor={frontdoor}"),
        format!("alt-cdn={}", 100 - frontdoor),
    ];
    if emergency {
        args.push("--emergency".into());
    }
    let out = TempDir::new("drill-cli");
    let stdout_path = out.path().join("stdout");
    let (Ok(stdout), Ok(stderr)) = (
        std::fs::File::create(&stdout_path),
        std::fs::File::create(out.path().join("stderr")),
    ) else {
        return Write::NotWritten("cannot create the output files".into());
    };
    let Ok(mut child) = Command::new(BIN)
        .args(&args)
        .arg("--config")
        .arg(config)
        .env("STEERDNS_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
    else {
        return Write::NotWritten("cannot start steerdns".into());
    };
    let started = Instant::now();
    let hung = loop {
        match child.try_wait() {
            Ok(Some(_)) => break false,
            Ok(None) if started.elapsed() < CLI_BOUND => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break true;
            }
        }
    };
    let printed = std::fs::read_to_string(&stdout_path).unwrap_or_default();
    match (hung, written_serial(&printed)) {
        (true, _) => Write::Hung(format!("weight set {args:?}: {printed}")),
        (false, Some(serial)) => Write::Landed(serial),
        (false, None) => Write::NotWritten(format!(
            "{printed}{}",
            std::fs::read_to_string(out.path().join("stderr")).unwrap_or_default()
        )),
    }
}

/// "wrote fleet control PREFIX revision R serial S: …" → S.
fn written_serial(stdout: &str) -> Option<u64> {
    stdout.lines().find_map(|line| {
        let rest = line.strip_prefix("wrote fleet control ")?;
        let after = rest.split(" serial ").nth(1)?;
        after
            .split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    })
}

/// Every serial in the fleet's history in etcd (`<prefix>/history/<serial, 20 digits>`).
fn history_serials(etcd: &Etcd) -> BTreeSet<u64> {
    let keys = etcd.etcdctl(&[
        "get",
        &format!("{PREFIX}/history/"),
        "--prefix",
        "--keys-only",
    ]);
    keys.lines()
        .filter_map(|k| k.rsplit('/').next()?.parse().ok())
        .collect()
}

fn signal(pid: u32, signal: libc::c_int) {
    let pid = libc::pid_t::try_from(pid).expect("pid fits pid_t");
    // SAFETY: kill(2) only sends a signal, to a server process this test started.
    unsafe { libc::kill(pid, signal) };
}

#[derive(Default, Debug)]
struct Faults {
    etcd_kills: u64,
    node_freezes: u64,
    node_restarts: u64,
    garbage_keys: u64,
    deleted_keys: u64,
    refused_versions: u64,
}

/// The garbage and deletions the drill injects, as etcdctl arguments.
fn key_fault(rng: &mut Rng) -> (Vec<String>, bool) {
    let key = |k: &str| format!("{PREFIX}/{k}");
    let puts = [
        ("nodes/ns-ghost", "{\"name\": 7"),
        ("nodes/ns2", "not json at all"),
        ("rollout/state", "{\"phase\": \"galloping\"}"),
        ("rollout/coordinator", "ghost"),
        ("shield/leader", "ghost"),
        ("shield/state", "[1, 2, 3"),
        ("shield/nodes/ns-ghost", "{}"),
        ("health/probers/ns-ghost", "{\"site\": null"),
    ];
    let deletes = [
        "rollout/state",
        "rollout/coordinator",
        "shield/leader",
        "shield/state",
        "nodes/ns3",
    ];
    if rng.below(3) == 0 {
        let k = deletes[rng.below(deletes.len() as u64) as usize];
        (vec!["del".into(), key(k)], true)
    } else {
        let (k, v) = puts[rng.below(puts.len() as u64) as usize];
        (vec!["put".into(), key(k), v.into()], false)
    }
}

#[test]
fn a_fleet_under_random_faults_never_serves_a_bad_version_and_converges_after() {
    let seed: u64 = std::env::var("FLEET_DRILL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64 | 1)
                .unwrap_or(1)
        });
    let drill_secs: u64 = std::env::var("FLEET_DRILL_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    println!("fleet drill: seed {seed}, {drill_secs} s of faults");
    let mut rng = Rng(seed);

    let mut cluster = EtcdCluster::start(3);
    let endpoints = cluster.endpoints();
    let mut nodes: Vec<Node> = (1..=3)
        .map(|i| {
            let setup = Setup::new(&format!("drill-ns{i}"));
            setup.extend_config(&node_config(&endpoints));
            let mut node = Node {
                name: format!("ns{i}"),
                setup,
                daemon: None,
                env: Vec::new(),
            };
            node.start();
            node
        })
        .collect();
    let configs: Vec<std::path::PathBuf> = nodes.iter().map(|n| n.setup.config.clone()).collect();

    // The first write settles the fleet (and proves it works before any fault).
    let Write::Landed(first) = write_weights(&configs[0], 90, true) else {
        panic!("the first write did not land");
    };
    wait_until_all_serve(&nodes, first, CONVERGE_BOUND);

    let reachable: Arc<Mutex<Vec<Reachable>>> = Arc::new(Mutex::new(
        nodes
            .iter()
            .map(|n| Reachable {
                dns: Some(n.daemon().dns),
                epoch: 0,
            })
            .collect(),
    ));
    let observed = Arc::new(Mutex::new(Observed::default()));
    let acked = Arc::new(Mutex::new(vec![first]));
    let hung = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));

    let reader = {
        let (reachable, observed, stop) = (reachable.clone(), observed.clone(), stop.clone());
        std::thread::spawn(move || {
            let subnets = distinct_subnets(SUBNETS);
            let mut round = 0usize;
            while !stop.load(Ordering::Relaxed) {
                for i in 0..3 {
                    let current = |i: usize| reachable.lock().unwrap_or_else(|e| e.into_inner())[i];
                    let subnet = &subnets[(round + i) % subnets.len()];
                    read_node(
                        &format!("ns{}", i + 1),
                        current(i),
                        || current(i),
                        subnet,
                        &observed,
                    );
                }
                round += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    let writer = {
        let (acked, hung, stop, configs) =
            (acked.clone(), hung.clone(), stop.clone(), configs.clone());
        let mut rng = Rng(seed ^ 0x0005_eed0_fa11_7e57);
        std::thread::spawn(move || {
            let mut attempts = 0u64;
            while !stop.load(Ordering::Relaxed) {
                attempts += 1;
                let config = &configs[rng.below(3) as usize];
                let frontdoor = 1 + rng.below(99) as u32;
                match write_weights(config, frontdoor, rng.below(2) == 0) {
                    Write::Landed(serial) => {
                        acked.lock().unwrap_or_else(|e| e.into_inner()).push(serial)
                    }
                    Write::Hung(what) => hung.lock().unwrap_or_else(|e| e.into_inner()).push(what),
                    Write::NotWritten(_) => {}
                }
                std::thread::sleep(rng.millis(100, 600));
            }
            attempts
        })
    };

    let mut faults = Faults::default();
    let mut refused_serials = BTreeSet::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(drill_secs) {
        let bump = |i: usize, dns: Option<SocketAddr>| {
            let mut r = reachable.lock().unwrap_or_else(|e| e.into_inner());
            r[i].dns = dns;
            r[i].epoch += 1;
        };
        match rng.below(6) {
            0 => {
                let m = rng.below(3) as usize;
                cluster.members[m].stop();
                faults.etcd_kills += 1;
                std::thread::sleep(rng.millis(1000, 5000));
                cluster.members[m].restart();
            }
            1 => {
                let i = rng.below(3) as usize;
                bump(i, None);
                signal(nodes[i].daemon().pid(), libc::SIGSTOP);
                faults.node_freezes += 1;
                std::thread::sleep(rng.millis(500, 4000));
                signal(nodes[i].daemon().pid(), libc::SIGCONT);
                bump(i, Some(nodes[i].daemon().dns));
            }
            2 => {
                let i = rng.below(3) as usize;
                bump(i, None);
                nodes[i].kill();
                faults.node_restarts += 1;
                std::thread::sleep(rng.millis(200, 3000));
                nodes[i].start();
                bump(i, Some(nodes[i].daemon().dns));
            }
            3 => {
                // A version every taster refuses (it leaves `critical` nothing to serve), put
                // straight into etcd as automation might.
                // Far above every serial written so far, and each one far above the last, so
                // that the writes that follow it (one above the newest) never reuse one.
                let serial = 1_000_000_000 * (faults.refused_versions + 1);
                let text = format!("serial = {serial}\n{}", critical_control(0, 0, 0));
                if let Some(etcd) = cluster.any_running() {
                    etcd.etcdctl(&["put", &format!("{PREFIX}/control"), &text]);
                    refused_serials.insert(serial);
                    faults.refused_versions += 1;
                }
            }
            _ => {
                let (args, deleted) = key_fault(&mut rng);
                if let Some(etcd) = cluster.any_running() {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    etcd.etcdctl(&args);
                    if deleted {
                        faults.deleted_keys += 1;
                    } else {
                        faults.garbage_keys += 1;
                    }
                }
            }
        }
        std::thread::sleep(rng.millis(200, 1500));
    }

    // Faults stop: every process runs (the garbage stays where it was put).
    stop.store(true, Ordering::Relaxed);
    let attempts = writer.join().expect("writer thread");
    reader.join().expect("reader thread");
    for member in &mut cluster.members {
        if !member.is_running() {
            member.restart();
        }
    }
    let stopped = Instant::now();
    // A rollout state left unreadable by the garbage holds every node where it is until an
    // operator resets it (a coordinator never overwrites a state it cannot read: it may be a
    // newer binary's); the drill does what the status tells the operator to.
    let resets = reset_an_unreadable_rollout(&nodes, &configs[0]);
    let last = loop {
        let said = match write_weights(&configs[0], 50, true) {
            Write::Landed(serial) => break serial,
            Write::Hung(what) => {
                hung.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(what.clone());
                what
            }
            Write::NotWritten(said) => said,
        };
        assert!(
            stopped.elapsed() < CONVERGE_BOUND,
            "seed {seed}: no write landed within {CONVERGE_BOUND:?} after the faults stopped; the last attempt said:\n{said}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    acked.lock().unwrap_or_else(|e| e.into_inner()).push(last);
    wait_until_all_serve(
        &nodes,
        last,
        CONVERGE_BOUND.saturating_sub(stopped.elapsed()),
    );
    let converged_in = stopped.elapsed();

    let observed = observed.lock().unwrap_or_else(|e| e.into_inner());
    let acked = acked.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let history = match cluster.any_running() {
        Some(etcd) => history_serials(etcd),
        None => panic!("no etcd member runs after the drill"),
    };
    let lost: Vec<u64> = acked
        .iter()
        .copied()
        .filter(|s| !history.contains(s))
        .collect();
    let never_written: Vec<u64> = observed
        .served_serials
        .iter()
        .copied()
        .filter(|s| !history.contains(s))
        .collect();
    let served_refused: Vec<u64> = observed
        .served_serials
        .intersection(&refused_serials)
        .copied()
        .collect();
    let hung = hung.lock().unwrap_or_else(|e| e.into_inner()).clone();
    println!(
        "fleet drill: seed {seed}; faults {faults:?}; writes attempted {attempts}, acknowledged {}, lost {}, hung {}; rollout resets {resets}; answers checked {}, unanswered {}, bad {}; converged {:.1} s after the faults stopped",
        acked.len(),
        lost.len(),
        hung.len(),
        observed.answers_checked,
        observed.unanswered,
        observed.bad_answers.len(),
        converged_in.as_secs_f64()
    );
    assert!(observed.answers_checked > 0, "the reader checked no answer");
    assert!(
        observed.bad_answers.is_empty(),
        "seed {seed}: answers were SERVFAIL or empty: {:?}",
        observed.bad_answers
    );
    assert!(
        never_written.is_empty(),
        "seed {seed}: nodes served serials never written: {never_written:?} (history {history:?})"
    );
    assert!(
        served_refused.is_empty(),
        "seed {seed}: nodes served versions their tasters refuse: {served_refused:?}"
    );
    assert!(
        hung.is_empty(),
        "seed {seed}: CLI writes still running after {CLI_BOUND:?}: {hung:?}"
    );
    assert!(
        lost.is_empty(),
        "seed {seed}: acknowledged writes missing from the history: {lost:?}"
    );
}

/// Runs `steerdns rollout reset` if a node's status says the rollout state is unreadable (and
/// says what to do about it); the number of resets run (0 or 1).
fn reset_an_unreadable_rollout(nodes: &[Node], config: &std::path::Path) -> u32 {
    let deadline = Instant::now() + CONVERGE_BOUND;
    let phase = loop {
        // A node that has just been thawed or restarted may not have read the state yet.
        match nodes[0].daemon().try_status() {
            Some(status) if status["fleet"]["connected"] == true => {
                break status["fleet"]["rollout"]["phase"].clone();
            }
            _ if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            other => panic!("ns1 not connected to etcd after the faults stopped: {other:?}"),
        }
    };
    if phase != "unreadable" {
        return 0;
    }
    let output = Command::new(BIN)
        .args(["rollout", "reset", "--config"])
        .arg(config)
        .env("STEERDNS_LOG", "warn")
        .output()
        .expect("run steerdns rollout reset");
    assert!(
        output.status.success(),
        "rollout reset: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    1
}

/// Waits until every node answers `CH TXT serial.steerdns` with `serial` or later.
fn wait_until_all_serve(nodes: &[Node], serial: u64, limit: Duration) {
    let deadline = Instant::now() + limit;
    for node in nodes {
        let dns = node.daemon().dns;
        loop {
            let served = ask(dns, &chaos_serial_query())
                .as_ref()
                .and_then(serial_in)
                .unwrap_or(0);
            if served >= serial {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{} serves serial {served}, not {serial}, {limit:?} after the faults stopped:\n{}",
                node.name,
                node.status()["fleet"]
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
