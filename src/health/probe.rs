//! One check of one target: HTTP(S) GET, TCP connect, or a DNS query over UDP. Each returns
//! `Ok(())` or why it failed; the caller bounds it with the monitor's timeout. Runs in the
//! prober's tasks, never on the serving path.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio_rustls::rustls;

use crate::hash::{fnv1a64_more, FNV1A64_OFFSET_BASIS};
use crate::policy::monitor::{Check, TlsCheck};

/// Most bytes of an HTTP response read (status line, headers and the start of the body).
const MAX_RESPONSE: usize = 64 * 1024 + 8 * 1024;

/// Runs one check.
pub async fn check(check: &Check, agent: &str) -> Result<(), String> {
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
            let request = format!(
                "GET {path} HTTP/1.0\r\nHost: {}\r\nUser-Agent: {agent}\r\nAccept: */*\r\nConnection: close\r\n\r\n",
                host_header(host, *port, tls.is_some())
            );
            let response = match tls {
                None => exchange(stream, request.as_bytes()).await?,
                Some(mode) => {
                    let config = client_config(mode)?;
                    let name = rustls::pki_types::ServerName::try_from(host.clone())
                        .map_err(|e| format!("TLS server name {host:?}: {e}"))?;
                    let tls = tokio_rustls::TlsConnector::from(config)
                        .connect(name, stream)
                        .await
                        .map_err(|e| format!("TLS: {e}"))?;
                    exchange(tls, request.as_bytes()).await?
                }
            };
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

fn host_header(host: &str, port: u16, tls: bool) -> String {
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host.to_owned()
    };
    match (tls, port) {
        (false, 80) | (true, 443) => host,
        _ => format!("{host}:{port}"),
    }
}

/// Names go through the bounded, shared lookups of [`super::lookup`] (a hanging system
/// resolver must not pile up threads).
async fn resolve(host: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    super::lookup::Lookups::system().resolve(host, port).await
}

async fn connect(host: &str, port: u16) -> Result<TcpStream, String> {
    let mut last = String::new();
    for addr in resolve(host, port).await? {
        match TcpStream::connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = format!("connect {addr}: {e}"),
        }
    }
    Err(last)
}

/// Sends the request and reads the response until the server closes or the limit.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &[u8],
) -> Result<Vec<u8>, String> {
    stream
        .write_all(request)
        .await
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut response = Vec::with_capacity(4096);
    let mut buf = [0u8; 4096];
    while response.len() < MAX_RESPONSE {
        match stream.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => response.extend_from_slice(&buf[..n]),
            // A TLS server that closes without close_notify: what arrived is the response.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !response.is_empty() => {
                break
            }
            Err(e) => return Err(format!("reading the response: {e}")),
        }
    }
    Ok(response)
}

/// Checks status code and body of an HTTP response.
pub fn judge_http(response: &[u8], status: (u16, u16), body: Option<&str>) -> Result<(), String> {
    let line_end = response
        .windows(2)
        .position(|w| w == b"\r\n")
        .ok_or_else(|| "no HTTP status line in the response".to_owned())?;
    let line = String::from_utf8_lossy(&response[..line_end]);
    let mut parts = line.split_whitespace();
    let code = match (parts.next(), parts.next()) {
        (Some(version), Some(code)) if version.starts_with("HTTP/") => code.parse::<u16>().ok(),
        _ => None,
    }
    .ok_or_else(|| format!("not an HTTP status line: {:?}", truncate(&line)))?;
    if code < status.0 || code > status.1 {
        return Err(format!(
            "HTTP status {code}, expected {}..={}",
            status.0, status.1
        ));
    }
    if let Some(wanted) = body {
        let start = response
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .map_or(response.len(), |at| at + 4);
        let found = response[start..]
            .windows(wanted.len().max(1))
            .any(|w| w == wanted.as_bytes());
        if !found {
            return Err(format!("body does not contain {wanted:?}"));
        }
    }
    Ok(())
}

fn truncate(text: &str) -> String {
    text.chars().take(60).collect()
}

async fn dns(host: &str, port: u16, name: &[u8], qtype: u16) -> Result<(), String> {
    let server = resolve(host, port).await?[0];
    let local: SocketAddr = if server.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(local)
        .await
        .map_err(|e| format!("DNS socket: {e}"))?;
    socket
        .connect(server)
        .await
        .map_err(|e| format!("DNS socket: {e}"))?;
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
        .map_err(|e| format!("DNS query to {server}: {e}"))?;
    let mut buf = [0u8; 1500];
    loop {
        let n = socket
            .recv(&mut buf)
            .await
            .map_err(|e| format!("DNS reply from {server}: {e}"))?;
        let reply = &buf[..n];
        if reply.len() < 12 || reply[..2] != id.to_be_bytes() || reply[2] & 0x80 == 0 {
            continue; // not the reply to this query
        }
        let rcode = reply[3] & 0x0f;
        return match rcode {
            0 => Ok(()),
            _ => Err(format!("DNS rcode {rcode} from {server}")),
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
fn client_config(mode: &TlsCheck) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
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

    #[test]
    fn http_status_and_body_are_judged() {
        let ok = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\nall good\n";
        assert_eq!(judge_http(ok, (200, 399), Some("good")), Ok(()));
        let err = judge_http(ok, (200, 399), Some("ready")).unwrap_err();
        assert!(err.contains("does not contain"), "{err}");
        let err = judge_http(b"HTTP/1.1 503 Busy\r\n\r\n", (200, 399), None).unwrap_err();
        assert!(err.contains("503"), "{err}");
        assert!(judge_http(b"garbage", (200, 399), None).is_err());
        assert!(judge_http(b"SSH-2.0-x\r\n", (200, 399), None).is_err());
        // A header never counts as the body.
        let header_only = b"HTTP/1.0 200 OK\r\nX-Ready: good\r\n\r\n";
        assert!(judge_http(header_only, (200, 200), Some("good")).is_err());
    }
}
