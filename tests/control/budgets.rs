//! Per-tenant budgets (issue 31, item 5) with the real binary over real sockets: one tenant's
//! names flooded over UDP at about 2,000 queries per second, against a server told it answers
//! 2,000 with budgets engaging at 5 % of that; once status says they are
//! engaged, the flooded tenant's responses are held to its budget (dropped beyond it, counted
//! in status and metrics) while another tenant's queries are all answered on the first try,
//! and TCP is never budgeted; when the flood stops they release again.

use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;

use hickory_proto::op::Message;

use crate::common::{read_frame, write_frame};
use crate::control_common::*;
use crate::tenants::{metric, owned, setup_with, wait_tenants};

const FLOOD_LIMIT: Duration = Duration::from_secs(30);

/// Sends `name`'s A query from one socket, about 2,000 a second, until `stop` (or 30 s), and
/// counts the replies received.
struct Flood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    received: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Flood {
    fn start(server: SocketAddr, name: &str) -> Flood {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind");
        socket
            .set_read_timeout(Some(Duration::from_millis(100)))
            .expect("timeout");
        let receiver = socket.try_clone().expect("clone socket");
        let packet = plain_query(name, RecordType::A)
            .to_vec()
            .expect("encode query");
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let received = Arc::new(AtomicU64::new(0));
        let started = Instant::now();
        let send = {
            let (stop, sent) = (stop.clone(), sent.clone());
            std::thread::spawn(move || {
                // About 2,000 queries per second: well over the budget and the threshold, yet
                // within what even a debug build reads, so that the kernel drops nothing and
                // every loss is the budget's (saturation itself is benches/budgets.sh's).
                while !stop.load(Ordering::Relaxed) && started.elapsed() < FLOOD_LIMIT {
                    for _ in 0..20 {
                        if socket.send_to(&packet, server).is_ok() {
                            sent.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            })
        };
        let receive = {
            let (stop, received) = (stop.clone(), received.clone());
            std::thread::spawn(move || {
                let mut buf = [0u8; 1500];
                while !stop.load(Ordering::Relaxed) && started.elapsed() < FLOOD_LIMIT {
                    if receiver.recv_from(&mut buf).is_ok() {
                        received.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        Flood {
            stop,
            sent,
            received,
            threads: vec![send, receive],
        }
    }

    fn counts(&self) -> (u64, u64) {
        (
            self.sent.load(Ordering::Relaxed),
            self.received.load(Ordering::Relaxed),
        )
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            let _ = t.join();
        }
    }
}

/// One query over TCP.
fn tcp_exchange(server: SocketAddr, query: &Message) -> Message {
    let mut stream =
        std::net::TcpStream::connect_timeout(&server, Duration::from_secs(5)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    write_frame(&mut stream, &query.to_vec().expect("encode"));
    Message::from_vec(&read_frame(&mut stream).expect("a TCP answer")).expect("well-formed")
}

fn budgets(server: &Daemon) -> serde_json::Value {
    server.status()["budgets"].clone()
}

fn wait_budgets(server: &Daemon, what: &str, ready: impl Fn(&serde_json::Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let b = budgets(server);
        if ready(&b) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {b:#}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_flooded_tenant_is_held_to_its_budget_while_another_is_answered() {
    let setup = setup_with("budgets", 2, |_| 300);
    // Engaged at 100 UDP queries/s; one tenant gets 200 responses/s while engaged.
    setup.extend_config(
        "[budgets]\nenabled = true\ncapacity_qps = 2000\nengage_at = 0.05\ntenant_share = 0.1\nslip = 0\n",
    );
    let server = setup.start();
    wait_tenants(&server, "both tenants served", |t| t["served"] == 2);
    let b = budgets(&server);
    assert_eq!(b["engaged"], false, "{b:#}");
    assert_eq!(
        (b["engage_qps"].as_u64(), b["tenant_rate"].as_u64()),
        (Some(100), Some(200))
    );

    let flooded = owned("t0000");
    let quiet = owned("t0001");
    let flood = Flood::start(server.dns, &flooded);
    wait_budgets(&server, "engaged under the flood", |b| b["engaged"] == true);
    assert_eq!(metric(&server, "steerdns_tenant_budgets_engaged", &[]), 1.0);

    // The other tenant: every query answered on its first try.
    let packet = plain_query(&quiet, RecordType::A).to_vec().expect("encode");
    let answered = (0..50)
        .filter(|_| udp_once(server.dns, &packet, Duration::from_secs(2)).is_some())
        .count();
    // TCP is never budgeted, even for the flooded tenant.
    let tcp = tcp_exchange(server.dns, &plain_query(&flooded, RecordType::A));
    assert!(!a_records(&tcp).is_empty(), "{tcp:?}");

    // The flooded tenant over a measured second: about its budget, far fewer than sent.
    let (sent_before, received_before) = flood.counts();
    let window = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let (sent_after, received_after) = flood.counts();
    let seconds = window.elapsed().as_secs_f64();
    let during = budgets(&server);
    let engaged_still = during["engaged"] == true;
    println!("budgets during the window: {during}");
    flood.stop();
    let sent = sent_after - sent_before;
    let received = received_after - received_before;
    println!(
        "flooded tenant: {sent} sent, {received} answered in {seconds:.2} s (budget 200/s); \
         the other tenant: {answered} of 50 answered"
    );
    assert_eq!(answered, 50, "the other tenant keeps its answers");
    assert!(engaged_still, "the flood held the budgets engaged");
    assert!(
        received as f64 <= 200.0 * seconds + 200.0 + 50.0,
        "held to its budget (rate + one burst): {received} answered in {seconds:.2} s"
    );
    assert!(
        sent > received * 2,
        "the flood was over budget: {sent} sent"
    );
    let b = budgets(&server);
    assert!(b["dropped"].as_u64().is_some_and(|d| d > 0), "{b:#}");
    assert!(
        metric(
            &server,
            "steerdns_tenant_budget_limited_total",
            &[("verdict", "dropped")]
        ) > 0.0
    );

    // The flood over: released.
    wait_budgets(&server, "released after the flood", |b| {
        b["engaged"] == false
    });
    assert!(udp_once(
        server.dns,
        &plain_query(&flooded, RecordType::A)
            .to_vec()
            .expect("encode"),
        Duration::from_secs(2)
    )
    .is_some());
}
