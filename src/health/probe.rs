//! One check of one target: HTTP(S) GET, TCP connect, or a DNS query over UDP. Each returns
//! `Ok(())` or why it failed; the caller bounds it with the monitor's timeout. Runs in the
//! prober's tasks, never on the serving path.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use tokio::net::{TcpStream, UdpSocket};
use tokio_rustls::rustls;

use crate::hash::{fnv1a64_more, FNV1A64_OFFSET_BASIS};
use crate::http_client::{self, BaseUrl, BodyLimit, Request, Response, Scheme};
use crate::policy::monitor::{Check, TlsCheck};

/// Most bytes of an HTTP response body read: `expect_body` is looked for in its start.
const MAX_BODY: u64 = 64 * 1024;

/// Why a check failed, as the target's status shows it (`last_error`).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The target's name did not resolve (the shared lookups say why).
    #[error("{0}")]
    Lookup(String),
    #[error("{host}: the name has no address")]
    NoAddress { host: String },
    #[error("connect {addr}: {source}")]
    Connect {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    Http(#[from] http_client::HttpError),
    /// The TLS client could not be set up (protocol versions, the system's roots).
    #[error("TLS: {0}")]
    Tls(String),
    /// The system's CA roots could not be read (for `tls = "verify"`).
    #[error("{0}")]
    Roots(String),
    #[error("HTTP status {code}, expected {low}..={high}")]
    Status { code: u16, low: u16, high: u16 },
    #[error("body does not contain {wanted:?}")]
    Body { wanted: String },
    #[error("DNS socket: {0}")]
    DnsSocket(std::io::Error),
    #[error("DNS query to {server}: {source}")]
    DnsQuery {
        server: SocketAddr,
        source: std::io::Error,
    },
    #[error("DNS reply from {server}: {source}")]
    DnsReply {
        server: SocketAddr,
        source: std::io::Error,
    },
    #[error("DNS rcode {rcode} from {server}")]
    DnsRcode { rcode: u8, server: SocketAddr },
}

/// Runs one check.
pub async fn check(check: &Check, agent: &str) -> Result<(), ProbeError> {
    match check {
        Check::Tcp { host, port } => {
            connect(host, *port).await?;
            Ok(())
        }
        Check::Http {
            host,
            port,
            path,
            tls,
            status,
            body,
        } => {
            let stream = connect(host, *port).await?;
            let base = http_base(host, *port, tls.is_some());
            let tls = tls.as_ref().map(client_config).transpose()?;
            let headers = [format!("User-Agent: {agent}"), "Accept: */*".to_owned()];
            let request = Request {
                method: "GET",
                path,
                headers: &headers,
                body: b"",
            };
            let response = http_client::send_over(
                stream,
                &base,
                tls.as_ref(),
                request,
                BodyLimit::Truncate(MAX_BODY),
            )
            .await?;
            judge_http(&response, *status, body.as_deref())
        }
        Check::Dns {
            host,
            port,
            name,
            qtype,
        } => dns(host, *port, name, *qtype).await,
    }
}

/// The check's target as a [`BaseUrl`] (IPv6 addresses in brackets, as in a URL).
fn http_base(host: &str, port: u16, tls: bool) -> BaseUrl {
    let bracketed = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    BaseUrl {
        scheme: if tls { Scheme::Https } else { Scheme::Http },
        authority: format!("{bracketed}:{port}"),
        host: host.to_owned(),
        prefix: String::new(),
    }
}

/// Names go through the bounded, shared lookups of [`super::lookup`] (a hanging system
/// resolver must not pile up threads).
/// Never an empty list.
async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, ProbeError> {
    let addrs = super::lookup::Lookups::system()
        .resolve(host, port)
        .await
        .map_err(ProbeError::Lookup)?;
    match addrs.is_empty() {
        true => Err(ProbeError::NoAddress {
            host: host.to_owned(),
        }),
        false => Ok(addrs),
    }
}

/// A connection to the first of the target's addresses that takes one (the last failure
/// says why none did).
async fn connect(host: &str, port: u16) -> Result<TcpStream, ProbeError> {
    let mut last = ProbeError::NoAddress {
        host: host.to_owned(),
    };
    for addr in resolve(host, port).await? {
        match TcpStream::connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(source) => last = ProbeError::Connect { addr, source },
        }
    }
    Err(last)
}

/// Checks the status code and the (start of the) body of an HTTP response.
pub fn judge_http(
    response: &Response,
    status: (u16, u16),
    body: Option<&str>,
) -> Result<(), ProbeError> {
    let code = response.status;
    if code < status.0 || code > status.1 {
        return Err(ProbeError::Status {
            code,
            low: status.0,
            high: status.1,
        });
    }
    match body {
        Some(wanted) if !response.body.contains(wanted) => Err(ProbeError::Body {
            wanted: wanted.to_owned(),
        }),
        _ => Ok(()),
    }
}

async fn dns(host: &str, port: u16, name: &[u8], qtype: u16) -> Result<(), ProbeError> {
    let first = resolve(host, port).await?.first().copied();
    let server = first.ok_or_else(|| ProbeError::NoAddress {
        host: host.to_owned(),
    })?;
    let local: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local)
        .await
        .map_err(ProbeError::DnsSocket)?;
    socket
        .connect(server)
        .await
        .map_err(ProbeError::DnsSocket)?;
    let id = query_id(name);
    let mut query = Vec::with_capacity(name.len() + 16);
    query.extend_from_slice(&id.to_be_bytes());
    query.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
    query.extend_from_slice(name);
    query.extend_from_slice(&qtype.to_be_bytes());
    query.extend_from_slice(&1u16.to_be_bytes());
    socket
        .send(&query)
        .await
        .map_err(|source| ProbeError::DnsQuery { server, source })?;
    let mut buf = [0u8; 1500];
    loop {
        let n = socket
            .recv(&mut buf)
            .await
            .map_err(|source| ProbeError::DnsReply { server, source })?;
        let reply = &buf[..n];
        if reply.len() < 12 || reply[..2] != id.to_be_bytes() || reply[2] & 0x80 == 0 {
            continue; // not the reply to this query
        }
        let rcode = reply[3] & 0x0f;
        return match rcode {
            0 => Ok(()),
            _ => Err(ProbeError::DnsRcode { rcode, server }),
        };
    }
}

/// A query id that differs between checks (not a security measure: the reply must only match
/// the query, and the socket is connected to the server).
fn query_id(name: &[u8]) -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let h = fnv1a64_more(FNV1A64_OFFSET_BASIS ^ u64::from(nanos), name);
    (h >> 16) as u16
}

/// The TLS client configuration of a mode (built once per mode and reused).
fn client_config(mode: &TlsCheck) -> Result<Arc<rustls::ClientConfig>, ProbeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ProbeError::Tls(e.to_string()))?;
    match mode {
        TlsCheck::Verify => {
            static VERIFY: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
            VERIFY
                .get_or_init(|| {
                    let roots = crate::http_client::system_roots()?;
                    Ok(Arc::new(
                        builder.with_root_certificates(roots).with_no_client_auth(),
                    ))
                })
                .clone()
                .map_err(ProbeError::Roots)
        }
        TlsCheck::Skip | TlsCheck::Pin(_) => {
            let pin = match mode {
                TlsCheck::Pin(digest) => Some(*digest),
                _ => None,
            };
            let verifier = Arc::new(Lenient { provider, pin });
            Ok(Arc::new(
                builder
                    .dangerous()
                    .with_custom_certificate_verifier(verifier)
                    .with_no_client_auth(),
            ))
        }
    }
}

/// `tls = "skip"` (accepts any certificate) and `tls = "sha256:…"` (accepts exactly the
/// certificate with that digest). Handshake signatures are still verified.
#[derive(Debug)]
struct Lenient {
    provider: Arc<rustls::crypto::CryptoProvider>,
    pin: Option<[u8; 32]>,
}

impl rustls::client::danger::ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        if let Some(pin) = self.pin {
            let digest = ring::digest::digest(&ring::digest::SHA256, end_entity.as_ref());
            if digest.as_ref() != pin {
                return Err(rustls::Error::General(format!(
                    "certificate sha256:{} is not the pinned one",
                    data_encoding::HEXLOWER.encode(digest.as_ref())
                )));
            }
        }
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A check of a one-shot server on loopback that answers `reply` to the first request.
    async fn check_against(
        reply: &'static [u8],
        status: (u16, u16),
        body: Option<&str>,
    ) -> Result<(), String> {
        check_once(reply, status, body)
            .await
            .map_err(|e| e.to_string())
    }

    async fn check_once(
        reply: &'static [u8],
        status: (u16, u16),
        body: Option<&str>,
    ) -> Result<(), ProbeError> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let server = tokio::spawn(async move {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            let _ = stream.write_all(reply).await;
            String::from_utf8_lossy(&request).into_owned()
        });
        let http = Check::Http {
            host: "127.0.0.1".to_owned(),
            port,
            path: "/healthz".to_owned(),
            tls: None,
            status,
            body: body.map(str::to_owned),
        };
        let result = check(&http, "steerdns-test").await;
        let request = server.await.unwrap();
        assert!(
            request.starts_with("GET /healthz HTTP/1.1\r\n"),
            "{request}"
        );
        assert!(
            request.contains("user-agent: steerdns-test\r\n"),
            "{request}"
        );
        assert!(
            request.contains(&format!("host: 127.0.0.1:{port}\r\n")),
            "{request}"
        );
        result
    }

    #[tokio::test]
    async fn http_status_and_body_are_judged() {
        let ok = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall good\n";
        assert_eq!(check_against(ok, (200, 399), Some("good")).await, Ok(()));
        let err = check_against(ok, (200, 399), Some("ready"))
            .await
            .unwrap_err();
        assert!(err.contains("does not contain"), "{err}");
        let busy = b"HTTP/1.1 503 Busy\r\nContent-Length: 0\r\n\r\n";
        let err = check_against(busy, (200, 399), None).await.unwrap_err();
        assert!(err.contains("503"), "{err}");
        assert!(check_against(b"garbage", (200, 399), None).await.is_err());
        assert!(check_against(b"SSH-2.0-x\r\n", (200, 399), None)
            .await
            .is_err());
        // A header never counts as the body.
        let header_only = b"HTTP/1.0 200 OK\r\nX-Ready: good\r\n\r\n";
        assert!(check_against(header_only, (200, 200), Some("good"))
            .await
            .is_err());
    }

    #[tokio::test]
    async fn a_chunked_body_is_judged_decoded_and_a_long_one_by_its_start() {
        // The chunk sizes sit between "all" and "good": only a decoded body contains "all good".
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nall \r\n4\r\ngood\r\n0\r\n\r\n";
        assert_eq!(
            check_against(chunked, (200, 200), Some("all good")).await,
            Ok(())
        );
        // A body longer than the limit is judged by its start, not refused.
        static LONG: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
        let long = LONG.get_or_init(|| {
            let mut r = b"HTTP/1.0 200 OK\r\n\r\nready ".to_vec();
            r.resize(r.len() + 200 * 1024, b'x');
            r.extend_from_slice(b" tail");
            r
        });
        assert_eq!(check_against(long, (200, 200), Some("ready")).await, Ok(()));
        let err = check_against(long, (200, 200), Some("tail"))
            .await
            .unwrap_err();
        assert!(err.contains("does not contain"), "{err}");
    }

    #[tokio::test]
    async fn failures_are_typed_and_say_where() {
        // A closed port: the connection's address and the OS error.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let tcp = Check::Tcp {
            host: "127.0.0.1".to_owned(),
            port,
        };
        match check(&tcp, "t").await {
            Err(e @ ProbeError::Connect { .. }) => {
                assert!(
                    e.to_string()
                        .starts_with(&format!("connect 127.0.0.1:{port}: ")),
                    "{e}"
                )
            }
            other => panic!("{other:?}"),
        }
        // A DNS server answering NXDOMAIN: the rcode and the server.
        let server = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buf = [0u8; 512];
            let (n, from) = server.recv_from(&mut buf).await.unwrap();
            buf[2] |= 0x80;
            buf[3] = 3;
            let _ = server.send_to(&buf[..n], from).await;
        });
        let dns = Check::Dns {
            host: "127.0.0.1".to_owned(),
            port: addr.port(),
            name: b"\x07example\x03com\x00".to_vec(),
            qtype: 1,
        };
        match check(&dns, "t").await {
            Err(e @ ProbeError::DnsRcode { rcode: 3, .. }) => {
                assert_eq!(e.to_string(), format!("DNS rcode 3 from {addr}"))
            }
            other => panic!("{other:?}"),
        }
    }
}
