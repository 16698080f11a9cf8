//! A bounded UDP query load on loopback for tests that change things while the server serves:
//! a few sockets, each keeping a fixed number of queries in flight, every reply matched by id
//! and tallied by rcode. A query unanswered for [`QUERY_TIMEOUT`] counts as lost.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;

use super::{distinct_subnets, ecs_query, EU_WEST_SUBNET};

/// Queries in flight per socket.
pub const IN_FLIGHT_PER_SOCKET: usize = 25;
/// A query unanswered this long is lost.
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(2);

const RCODE_SERVFAIL: u8 = 2;

#[derive(Debug, Default, Clone, Copy)]
pub struct Counts {
    pub sent: u64,
    pub answered: u64,
    pub lost: u64,
    pub servfail: u64,
    /// Any other rcode than NOERROR and SERVFAIL.
    pub other_rcode: u64,
    /// NOERROR without a single answer record (every name asked has data).
    pub empty: u64,
    /// Replies whose id matched nothing in flight (late or duplicate).
    pub unexpected: u64,
}

impl Counts {
    pub fn add(&mut self, o: &Counts) {
        self.sent += o.sent;
        self.answered += o.answered;
        self.lost += o.lost;
        self.servfail += o.servfail;
        self.other_rcode += o.other_rcode;
        self.empty += o.empty;
        self.unexpected += o.unexpected;
    }
}

/// Encoded queries to cycle through: steered names with many ECS subnets (weighted answers
/// change with the reloads) and static zone data. The id (first two bytes) is patched per send.
pub fn query_templates() -> Vec<Vec<u8>> {
    let mut templates = Vec::new();
    for subnet in distinct_subnets(200) {
        for name in ["warm.example.com.", "critical.example.com."] {
            let query = ecs_query(name, RecordType::A, &subnet);
            templates.push(query.to_vec().expect("encode"));
        }
    }
    for (name, rtype) in [
        ("contoso.edge.example.net.", RecordType::A),
        ("contoso.edge.example.net.", RecordType::AAAA),
        ("mail.example.com.", RecordType::A),
        ("www.example.com.", RecordType::A),
    ] {
        let query = ecs_query(name, rtype, EU_WEST_SUBNET);
        templates.push(query.to_vec().expect("encode"));
    }
    templates
}

/// One socket's query loop: keeps up to [`IN_FLIGHT_PER_SOCKET`] queries outstanding, each
/// with an id not otherwise in flight, until `stop`; then waits out what is still in flight.
pub fn load_loop(
    server: SocketAddr,
    templates: Arc<Vec<Vec<u8>>>,
    stop: Arc<AtomicBool>,
) -> Counts {
    let socket = UdpSocket::bind("127.0.0.1:0").expect("bind load socket");
    socket
        .set_read_timeout(Some(Duration::from_millis(20)))
        .expect("read timeout");
    let mut counts = Counts::default();
    let mut in_flight: HashMap<u16, Instant> = HashMap::new();
    let mut next_id: u16 = 0;
    let mut next_template = 0usize;
    let mut buf = vec![0u8; 4096];
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        if stopping && in_flight.is_empty() {
            return counts;
        }
        while !stopping && in_flight.len() < IN_FLIGHT_PER_SOCKET {
            while in_flight.contains_key(&next_id) {
                next_id = next_id.wrapping_add(1);
            }
            let mut packet = templates[next_template % templates.len()].clone();
            next_template += 1;
            packet[..2].copy_from_slice(&next_id.to_be_bytes());
            socket.send_to(&packet, server).expect("send query");
            in_flight.insert(next_id, Instant::now());
            counts.sent += 1;
            next_id = next_id.wrapping_add(1);
        }
        if let Ok((n, _)) = socket.recv_from(&mut buf) {
            tally(&buf[..n], &mut in_flight, &mut counts);
        }
        let before = in_flight.len();
        in_flight.retain(|_, sent| sent.elapsed() < QUERY_TIMEOUT);
        counts.lost += (before - in_flight.len()) as u64;
    }
}

/// Counts one reply by its header alone (id, rcode, answer count).
fn tally(reply: &[u8], in_flight: &mut HashMap<u16, Instant>, counts: &mut Counts) {
    if reply.len() < 12 {
        counts.unexpected += 1;
        return;
    }
    let id = u16::from_be_bytes([reply[0], reply[1]]);
    if in_flight.remove(&id).is_none() {
        counts.unexpected += 1;
        return;
    }
    counts.answered += 1;
    let rcode = reply[3] & 0x0f;
    let answers = u16::from_be_bytes([reply[6], reply[7]]);
    match rcode {
        0 if answers == 0 => counts.empty += 1,
        0 => {}
        RCODE_SERVFAIL => counts.servfail += 1,
        _ => counts.other_rcode += 1,
    }
}

/// A running load: `sockets` threads of [`load_loop`] against `server`.
pub struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<Counts>>,
}

impl Load {
    pub fn start(server: SocketAddr, sockets: usize) -> Load {
        let templates = Arc::new(query_templates());
        let stop = Arc::new(AtomicBool::new(false));
        let threads = (0..sockets)
            .map(|_| {
                let (templates, stop) = (templates.clone(), stop.clone());
                std::thread::spawn(move || load_loop(server, templates, stop))
            })
            .collect();
        Load { stop, threads }
    }

    /// Stops sending, waits for what is in flight (at most [`QUERY_TIMEOUT`]), sums the counts.
    pub fn stop(mut self) -> Counts {
        self.stop.store(true, Ordering::Relaxed);
        let mut counts = Counts::default();
        for thread in std::mem::take(&mut self.threads) {
            counts.add(&thread.join().expect("load thread"));
        }
        counts
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        // A failing test must not leave load threads running.
        self.stop.store(true, Ordering::Relaxed);
    }
}
