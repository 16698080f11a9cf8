//! The encrypted transports (`[server.tls]`) over real sockets with the real binary and
//! Debian's kdig: DNS over TLS (`+tls`), HTTPS (`+https`, POST and GET) and QUIC (`+quic`)
//! give the same answers as UDP -- a static name, geo answers chosen by ECS, a break-glass
//! profile -- and are counted per transport; hostile TLS clients (garbage handshakes, stalled
//! handshakes, connection floods) do not disturb UDP; `steerdns check` and reloads validate
//! the certificate and key; a reload swaps the certificate in service.

use crate::control_common;

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use hickory_proto::rr::RecordType;

use control_common::*;

/// `[server.tls]` for a copy, with the given certificate files and extra keys.
fn tls_section(cert: &std::path::Path, key: &std::path::Path, extra: &str) -> String {
    format!(
        "[server.tls]\ncert = {:?}\nkey = {:?}\ndot = [\"127.0.0.1:0\"]\ndoh = [\"127.0.0.1:0\"]\n\
         doq = [\"127.0.0.1:0\"]\n{extra}\n",
        cert.display().to_string(),
        key.display().to_string()
    )
}

/// A copy of the example with a fresh certificate and the break-glass weights set (every
/// `critical` client to the alternate CDN).
fn setup(label: &str, extra: &str) -> Setup {
    let setup = Setup::new(label);
    let (cert, key) = self_signed_cert(setup.dir.path(), "server", 365);
    setup.extend_config(&tls_section(&cert, &key, extra));
    setup.write_control_atomically(&critical_control(0, 100, 0));
    setup
}

/// kdig's answer with what legitimately differs between transports taken out: the message
/// ID (0 over QUIC), the statistics and the transport banner.
fn answer(server: SocketAddr, transport: &[&str], question: &[&str]) -> String {
    // EDNS on every query: kdig adds it over TLS by itself.
    let mut args = vec!["+nostats", "+edns"];
    args.extend_from_slice(transport);
    args.extend_from_slice(question);
    let (ok, out) = kdig(server, &args);
    assert!(ok, "kdig {args:?} failed:\n{out}");
    out.lines()
        .filter(|line| {
            ![";; TLS session", ";; HTTP session", ";; QUIC session"]
                .iter()
                .any(|banner| line.starts_with(banner))
        })
        .map(|line| match line.find(", id: ") {
            Some(at) => line[..at].to_string(),
            None => match line.find("; id: ") {
                Some(at) => line[..at].to_string(),
                None => line.to_string(),
            },
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The questions every transport must answer as UDP does, with a piece each answer must hold
/// (so that agreeing on an empty or wrong answer fails).
const QUESTIONS: &[(&[&str], &str)] = &[
    (&["example.com", "SOA"], "hostmaster.example.com."),
    (&["www.example.com", "A", "+subnet=5.1.2.0/24"], "192.0.2.1"),
    (
        &["gw.example.com", "A", "+subnet=81.2.69.160/27"],
        "203.0.113.10",
    ),
    (
        &["gw.example.com", "A", "+subnet=216.160.83.56/29"],
        "203.0.113.20",
    ),
    (
        &["gw.example.com", "A", "+subnet=2001:218::/32"],
        "203.0.113.30",
    ),
    (&["critical.example.com", "A"], ALT_CDN),
];

/// A counter of `/metrics` with exactly these labels (0 when absent).
fn metric(daemon: &Daemon, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (code, body) = http(daemon.admin, "GET", "/metrics", None);
    assert_eq!(code, 200, "GET /metrics: {body}");
    let wanted: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    body.lines()
        .filter(|line| {
            line.split(['{', ' ']).next() == Some(name)
                && wanted.iter().all(|w| line.contains(w.as_str()))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[test]
fn every_transport_answers_like_udp_and_is_counted() {
    let setup = setup("encrypted-answers", "");
    let daemon = setup.start();
    let (dot, doh, doq) = (
        daemon.listener("dot"),
        daemon.listener("doh"),
        daemon.listener("doq"),
    );
    let transports: [(SocketAddr, &[&str]); 4] = [
        (dot, &["+tls"]),
        (doh, &["+https"]),
        (doh, &["+https", "+https-get"]),
        (doq, &["+quic"]),
    ];
    for (question, must_hold) in QUESTIONS {
        let udp = answer(daemon.dns, &[], question);
        assert!(
            udp.contains(must_hold),
            "UDP answer to {question:?} lacks {must_hold}:\n{udp}"
        );
        for (server, transport) in &transports {
            let encrypted = answer(*server, transport, question);
            assert_eq!(
                encrypted, udp,
                "{transport:?} answers {question:?} unlike UDP"
            );
        }
    }
    let n = QUESTIONS.len() as f64;
    for (transport, queries) in [("tls", n), ("https", 2.0 * n), ("quic", n)] {
        let counted = metric(
            &daemon,
            "steerdns_queries_total",
            &[("transport", transport)],
        );
        assert_eq!(counted, queries, "queries counted for {transport}");
    }
    let status = daemon.status();
    let encrypted = &status["encrypted"];
    let listeners: Vec<String> = encrypted["listeners"]
        .as_array()
        .expect("listeners")
        .iter()
        .map(|l| format!("{} {}", l["transport"].as_str().unwrap_or("?"), l["addr"]))
        .collect();
    assert_eq!(
        listeners,
        [
            format!("tls \"{dot}\""),
            format!("https \"{doh}\""),
            format!("quic \"{doq}\""),
        ]
    );
    let days = encrypted["certificate"]["days_left"].as_i64();
    assert!(matches!(days, Some(363..=365)), "status: {encrypted:#}");
    let text = stdout(&daemon.cli(&["status"]));
    assert!(
        text.contains(&format!(
            "encrypted transports: tls {dot}, https {doh}, quic {doq}"
        )),
        "steerdns status:\n{text}"
    );
}

/// Connects from `source` (another loopback address than the test's own queries use).
fn connect_from(source: &str, to: SocketAddr) -> TcpStream {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let source: SocketAddr = format!("{source}:0").parse().expect("source address");
    socket.bind(&source.into()).expect("bind source");
    socket
        .connect_timeout(&to.into(), Duration::from_secs(5))
        .expect("connect");
    socket.into()
}

/// UDP keeps answering at once: `rounds` queries in a row, each answered.
fn udp_answers(daemon: &Daemon, rounds: usize) {
    let mut resolver = Resolver::new(daemon.dns);
    for _ in 0..rounds {
        let response = resolver.ask(&plain_query("example.com.", RecordType::SOA));
        assert_eq!(response.answers.len(), 1, "SOA over UDP: {response:?}");
    }
}

/// Waits (bounded) until a metric reaches `at_least`.
fn wait_for_metric(daemon: &Daemon, name: &str, labels: &[(&str, &str)], at_least: f64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let value = metric(daemon, name, labels);
        if value >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name}{labels:?} stayed at {value}, expected >= {at_least}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn hostile_tls_clients_do_not_disturb_udp_or_other_clients() {
    let setup = setup(
        "encrypted-hostile",
        "handshake_timeout_secs = 1\nmax_connections_per_client = 4\n",
    );
    let daemon = setup.start();
    let (dot, doh) = (daemon.listener("dot"), daemon.listener("doh"));
    let events = "steerdns_encrypted_connection_events_total";

    // Garbage instead of a ClientHello, on both TLS listeners.
    for target in [dot, doh] {
        for _ in 0..3 {
            let mut s = connect_from("127.0.2.2", target);
            let _ = s.write_all(b"GET / HTTP/1.0\r\n\r\nthis is not TLS at all\r\n");
        }
    }
    wait_for_metric(
        &daemon,
        events,
        &[("transport", "tls"), ("event", "handshake_failed")],
        3.0,
    );
    wait_for_metric(
        &daemon,
        events,
        &[("transport", "https"), ("event", "handshake_failed")],
        3.0,
    );
    udp_answers(&daemon, 20);

    // Slowloris: the start of a TLS record, then nothing; more connections than one client's
    // share. Held open while UDP and another client's DoT are served (kdig's 127.0.0.1 is in
    // another /24: a client is a prefix).
    let mut stalled = Vec::new();
    for _ in 0..8 {
        let mut s = connect_from("127.0.3.3", dot);
        let _ = s.write_all(&[0x16, 0x03, 0x01, 0x02]);
        stalled.push(s);
    }
    wait_for_metric(
        &daemon,
        events,
        &[("transport", "tls"), ("event", "refused_per_client")],
        4.0,
    );
    udp_answers(&daemon, 50);
    let (question, must_hold) = QUESTIONS[2];
    let over_tls = answer(dot, &["+tls"], question);
    assert!(
        over_tls.contains(must_hold),
        "DoT beside the slowloris:\n{over_tls}"
    );
    // DoH takes the same slowloris: two stalled handshakes from another client.
    for _ in 0..2 {
        let mut s = connect_from("127.0.0.5", doh);
        let _ = s.write_all(&[0x16, 0x03, 0x01, 0x02]);
        stalled.push(s);
    }
    // The stalled handshakes are cut at the handshake timeout, on both TLS listeners.
    wait_for_metric(
        &daemon,
        events,
        &[("transport", "tls"), ("event", "handshake_timeout")],
        4.0,
    );
    wait_for_metric(
        &daemon,
        events,
        &[("transport", "https"), ("event", "handshake_timeout")],
        2.0,
    );
    udp_answers(&daemon, 20);
    drop(stalled);

    // Garbage datagrams at the DoQ port: dropped, and DoQ and UDP go on answering.
    let doq = daemon.listener("doq");
    let junk = std::net::UdpSocket::bind("127.0.0.4:0").expect("bind");
    for i in 0..200u8 {
        let _ = junk.send_to(&[0xC0 | (i & 0x3F); 1200], doq);
    }
    udp_answers(&daemon, 20);
    let over_quic = answer(doq, &["+quic"], question);
    assert!(
        over_quic.contains(must_hold),
        "DoQ after the junk:\n{over_quic}"
    );
    let status = daemon.status();
    assert!(
        status["reloads_refused"].as_u64() == Some(0),
        "the server is unaffected: {status:#}"
    );
}

fn check(config: &std::path::Path) -> (bool, String) {
    let (status, text) = steerdns_check(&repo_path(""), &["--config".as_ref(), config.as_os_str()]);
    (status.success(), text)
}

#[test]
fn check_validates_the_certificate_and_key() {
    let setup = Setup::new("encrypted-check");
    let dir = setup.dir.path();
    let (cert, key) = self_signed_cert(dir, "good", 365);
    let (soon, soon_key) = self_signed_cert(dir, "soon", 5);
    let (_, other_key) = self_signed_cert(dir, "other", 365);
    let original = std::fs::read_to_string(&setup.config).expect("config");
    let with = |cert: &std::path::Path, key: &std::path::Path| {
        std::fs::write(
            &setup.config,
            format!("{original}\n{}", tls_section(cert, key, "")),
        )
        .expect("write config");
        check(&setup.config)
    };

    let (ok, text) = with(&cert, &key);
    assert!(ok && !text.contains("expires"), "a good pair:\n{text}");

    let (ok, text) = with(&soon, &soon_key);
    assert!(ok, "expiring soon is a warning, not an error:\n{text}");
    // 5 days at issue, 4 once a second has passed.
    assert!(
        text.contains("soon.pem: the certificate expires in 4 day(s)")
            || text.contains("soon.pem: the certificate expires in 5 day(s)"),
        "{text}"
    );

    let (ok, text) = with(&cert, &other_key);
    assert!(!ok, "a key of another certificate:\n{text}");
    assert!(
        text.contains("good.pem") && text.contains("other.key") && text.contains("does not belong"),
        "{text}"
    );

    let (ok, text) = with(&cert, &dir.join("missing.key"));
    assert!(!ok && text.contains("missing.key: cannot read"), "{text}");

    let (ok, text) = with(&key, &key);
    assert!(
        !ok && text.contains("good.key: no PEM certificate"),
        "{text}"
    );
}

#[test]
fn a_reload_swaps_the_certificate_and_a_bad_one_is_refused() {
    let setup = setup("encrypted-reload", "");
    let dir = setup.dir.path();
    let daemon = setup.start();
    let dot = daemon.listener("dot");
    let (question, must_hold) = QUESTIONS[0];
    let pinned = |cert: &std::path::Path| {
        let pin = format!("+tls-pin={}", spki_pin(cert));
        let mut args = vec![pin.as_str()];
        args.extend_from_slice(question);
        let (ok, out) = kdig(dot, &args);
        ok && out.contains(must_hold)
    };
    let first = dir.join("server.pem");
    assert!(pinned(&first), "the first certificate is served");

    // A new certificate and key in place of the old: served after the reload.
    let (next, next_key) = self_signed_cert(dir, "next", 90);
    std::fs::rename(&next, &first).expect("replace certificate");
    std::fs::rename(&next_key, dir.join("server.key")).expect("replace key");
    let before = daemon.accepted();
    daemon.sighup();
    let status = daemon.wait_for_accepted(before, Duration::from_secs(10));
    let days = status["encrypted"]["certificate"]["days_left"].as_i64();
    assert!(
        matches!(days, Some(88..=90)),
        "status: {:#}",
        status["encrypted"]
    );
    assert!(pinned(&first), "the new certificate is served");

    // A key that does not belong: the reload is refused, the new certificate stays.
    let (_, stray_key) = self_signed_cert(dir, "stray", 365);
    let served = spki_pin(&first);
    std::fs::rename(&stray_key, dir.join("server.key")).expect("replace key");
    let refused = daemon.refused();
    daemon.sighup();
    let status = daemon.wait_for_refusal(refused, Duration::from_secs(10));
    let reasons = refusal_reasons(&status).join("\n");
    assert!(reasons.contains("does not belong"), "{reasons}");
    let pin = format!("+tls-pin={served}");
    let mut args = vec![pin.as_str()];
    args.extend_from_slice(question);
    let (ok, out) = kdig(dot, &args);
    assert!(
        ok && out.contains(must_hold),
        "still served after the refusal:\n{out}"
    );
}

/// Clients of our own for the limits kdig cannot show (what a connection gets before it is
/// closed, and when): DoT on tokio-rustls, DoH on h2, DoQ on quinn -- the crates the server
/// uses, trusting the test's self-signed certificate for "ns1.example.net".
mod clients {
    use std::net::SocketAddr;
    use std::path::Path;
    use std::sync::Arc;

    use bytes::Bytes;
    use hickory_proto::op::Message;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::tls;

    pub type Tls = tokio_rustls::client::TlsStream<TcpStream>;

    pub fn query_bytes(id: u16) -> Vec<u8> {
        let mut query = super::plain_query("example.com.", super::RecordType::SOA);
        query.metadata.id = id;
        query.to_vec().expect("encode")
    }

    pub fn is_soa_answer(bytes: &[u8]) -> bool {
        Message::from_vec(bytes).is_ok_and(|m| m.answers.len() == 1)
    }

    pub async fn dot(cert: &Path, server: SocketAddr) -> Tls {
        let connector =
            tokio_rustls::TlsConnector::from(Arc::new(tls::client_config(cert, b"dot")));
        let tcp = TcpStream::connect(server).await.expect("connect");
        connector
            .connect(tls::server_name(), tcp)
            .await
            .expect("DoT handshake")
    }

    /// Sends `count` framed queries at once (pipelined).
    pub async fn dot_send(tls: &mut Tls, count: u16) {
        let mut frames = Vec::new();
        for id in 0..count {
            let query = query_bytes(id);
            frames.extend_from_slice(&(query.len() as u16).to_be_bytes());
            frames.extend_from_slice(&query);
        }
        tls.write_all(&frames).await.expect("send queries");
        tls.flush().await.expect("flush");
    }

    /// Reads framed answers until the server closes; returns how many were SOA answers.
    pub async fn dot_answers_until_closed(tls: &mut Tls) -> usize {
        let mut answered = 0;
        loop {
            let mut len = [0u8; 2];
            if tls.read_exact(&mut len).await.is_err() {
                return answered;
            }
            let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
            if tls.read_exact(&mut answer).await.is_err() {
                return answered;
            }
            answered += usize::from(is_soa_answer(&answer));
        }
    }

    pub type H2 = h2::client::SendRequest<Bytes>;

    /// A DoH connection; the connection's driver runs in the returned task, which ends when
    /// the server closes the connection.
    pub async fn doh(cert: &Path, server: SocketAddr) -> (H2, tokio::task::JoinHandle<()>) {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(tls::client_config(cert, b"h2")));
        let tcp = TcpStream::connect(server).await.expect("connect");
        let tls = connector
            .connect(tls::server_name(), tcp)
            .await
            .expect("DoH handshake");
        let (send, connection) = h2::client::handshake(tls).await.expect("HTTP/2");
        let driver = tokio::spawn(async move {
            let _ = connection.await;
        });
        (send, driver)
    }

    /// One POST; `Some(answer)` on a 200 with a DNS message, `None` when the connection no
    /// longer takes requests.
    pub async fn doh_post(send: &mut H2, id: u16) -> Option<Vec<u8>> {
        let mut ready = send.clone().ready().await.ok()?;
        let request = http::Request::post("https://ns1.example.net/dns-query")
            .header("content-type", "application/dns-message")
            .body(())
            .expect("request");
        let (response, mut body) = ready.send_request(request, false).ok()?;
        body.send_data(Bytes::from(query_bytes(id)), true).ok()?;
        let response = response.await.ok()?;
        assert_eq!(response.status(), 200, "DoH status");
        let mut stream = response.into_body();
        let mut answer = Vec::new();
        while let Some(chunk) = stream.data().await {
            let chunk = chunk.ok()?;
            let _ = stream.flow_control().release_capacity(chunk.len());
            answer.extend_from_slice(&chunk);
        }
        Some(answer)
    }

    pub async fn doq(cert: &Path, server: SocketAddr) -> quinn::Connection {
        let crypto =
            quinn::crypto::rustls::QuicClientConfig::try_from(tls::client_config(cert, b"doq"))
                .expect("QUIC client config");
        let mut endpoint =
            quinn::Endpoint::client("127.0.0.1:0".parse().expect("addr")).expect("endpoint");
        endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(crypto)));
        endpoint
            .connect(server, "ns1.example.net")
            .expect("connect")
            .await
            .expect("DoQ handshake")
    }

    /// One query on a stream of its own; `None` when the connection no longer answers.
    pub async fn doq_query(connection: &quinn::Connection) -> Option<Vec<u8>> {
        let (mut send, mut recv) = connection.open_bi().await.ok()?;
        let query = query_bytes(0); // RFC 9250: ID 0
        send.write_all(&(query.len() as u16).to_be_bytes())
            .await
            .ok()?;
        send.write_all(&query).await.ok()?;
        send.finish().ok()?;
        let mut len = [0u8; 2];
        recv.read_exact(&mut len).await.ok()?;
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(len))];
        recv.read_exact(&mut answer).await.ok()?;
        Some(answer)
    }
}

/// How long any one wait of the limits test may take before it fails.
const LIMIT_WAIT: Duration = Duration::from_secs(15);

async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LIMIT_WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing within {LIMIT_WAIT:?}"))
}

#[test]
fn each_transport_closes_after_its_queries_per_connection_and_when_idle() {
    let setup = setup(
        "encrypted-limits",
        "idle_timeout_secs = 1\nmax_queries_per_connection = 3\n",
    );
    let cert = setup.dir.path().join("server.pem");
    let daemon = setup.start();
    let (dot, doh, doq) = (
        daemon.listener("dot"),
        daemon.listener("doh"),
        daemon.listener("doq"),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        // DoT: five pipelined queries get three answers, then the server closes.
        let mut tls = clients::dot(&cert, dot).await;
        clients::dot_send(&mut tls, 5).await;
        let answered = bounded("DoT answers", clients::dot_answers_until_closed(&mut tls)).await;
        assert_eq!(answered, 3, "DoT answers before the close");

        // DoH: three POSTs answered, the fourth refused (GOAWAY), then the connection ends.
        let (mut h2, driver) = clients::doh(&cert, doh).await;
        for id in 0..3 {
            let answer = bounded("DoH answer", clients::doh_post(&mut h2, id)).await;
            assert!(
                answer.as_deref().is_some_and(clients::is_soa_answer),
                "DoH query {id}: {answer:?}"
            );
        }
        let fourth = bounded("DoH 4th", clients::doh_post(&mut h2, 3)).await;
        assert!(fourth.is_none(), "a 4th DoH request was answered");
        drop(h2);
        bounded("DoH connection end", driver).await.expect("driver");

        // DoQ: three streams answered, then the connection is closed.
        let quic = clients::doq(&cert, doq).await;
        for i in 0..3 {
            let answer = bounded("DoQ answer", clients::doq_query(&quic)).await;
            assert!(
                answer.as_deref().is_some_and(clients::is_soa_answer),
                "DoQ query {i}: {answer:?}"
            );
        }
        bounded("DoQ close", quic.closed()).await;
        assert!(
            clients::doq_query(&quic).await.is_none(),
            "a 4th DoQ query was answered"
        );

        // Idle: a connection that sends nothing is closed after idle_timeout_secs (1 s), on
        // every transport -- not at once, and not never.
        let not_before = Duration::from_millis(900);
        let started = std::time::Instant::now();
        let mut tls = clients::dot(&cert, dot).await;
        let answered = bounded(
            "DoT idle close",
            clients::dot_answers_until_closed(&mut tls),
        )
        .await;
        assert_eq!(answered, 0);
        assert!(
            started.elapsed() >= not_before,
            "DoT: {:?}",
            started.elapsed()
        );
        let started = std::time::Instant::now();
        let (h2, driver) = clients::doh(&cert, doh).await;
        bounded("DoH idle close", driver).await.expect("driver");
        drop(h2);
        assert!(
            started.elapsed() >= not_before,
            "DoH: {:?}",
            started.elapsed()
        );
        let started = std::time::Instant::now();
        let quic = clients::doq(&cert, doq).await;
        bounded("DoQ idle close", quic.closed()).await;
        assert!(
            started.elapsed() >= not_before,
            "DoQ: {:?}",
            started.elapsed()
        );
    });
    udp_answers(&daemon, 5);
}
