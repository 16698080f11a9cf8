//! The one HTTP client: hyper's HTTP/1.1 client connection over tokio, with rustls (ring) for
//! `https://`. One request per connection, bounded in time (the whole exchange, connect
//! included, within the caller's timeout) and in response size. Used by the operator CLI to
//! reach the admin endpoint, by drills, and by the shield's Prometheus load source
//! ([`crate::shield::prometheus`]), which may be `http://` or `https://`.
//!
//! Owns the wire exchange and the parsing of base URLs ([`BaseUrl`], over [`http::Uri`]):
//! what a caller does with a status code is its business. Callers are blocking threads
//! ([`request`], [`request_url`]: a current-thread runtime per request, built here only) or
//! async tasks ([`send`]).

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls;

/// The system CA bundle trusted for `https://` unless a CA file is configured.
pub const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// One response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("cannot resolve {host}: {reason}")]
    Resolve { host: String, reason: String },
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr}: TLS: {reason}")]
    Tls { addr: String, reason: String },
    #[error("{addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr}: no answer within {timeout:?}")]
    Timeout { addr: String, timeout: Duration },
    #[error("{addr}: the response is larger than {limit} bytes")]
    TooLarge { addr: String, limit: u64 },
    #[error("{addr}: {what}")]
    Http { addr: String, what: String },
}

/// `http` or `https`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

/// Where requests go: a scheme, `host:port` (port defaulted by scheme) and a path prefix
/// without a trailing slash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl {
    pub scheme: Scheme,
    /// `host:port` as written (IPv6 in brackets).
    pub authority: String,
    /// The host alone (no brackets): the TLS server name.
    pub host: String,
    pub prefix: String,
}

impl BaseUrl {
    /// The `Host` header: the authority, without the port when it is the scheme's default
    /// (RFC 9110 7.2).
    pub fn host_header(&self) -> &str {
        let default = match self.scheme {
            Scheme::Http => ":80",
            Scheme::Https => ":443",
        };
        self.authority
            .strip_suffix(default)
            .unwrap_or(&self.authority)
    }

    /// A plain-HTTP target at `host:port` (the admin endpoint).
    pub fn plain(authority: &str) -> Self {
        let host = match authority.rsplit_once(':') {
            Some((host, _)) => host,
            None => authority,
        };
        Self {
            scheme: Scheme::Http,
            authority: authority.to_string(),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            prefix: String::new(),
        }
    }
}

/// `http[s]://host[:port][/prefix]` → a [`BaseUrl`]. No user info, query or fragment.
pub fn parse_base_url(url: &str) -> Result<BaseUrl, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("{url:?}: not a URL ({e})"))?;
    let scheme = match uri.scheme_str() {
        Some("http") => Scheme::Http,
        Some("https") => Scheme::Https,
        _ => return Err(format!("{url:?}: must start with http:// or https://")),
    };
    let Some(authority) = uri.authority() else {
        return Err(format!("{url:?}: needs a host (and no user info)"));
    };
    if authority.as_str().contains('@') || authority.host().is_empty() {
        return Err(format!("{url:?}: needs a host (and no user info)"));
    }
    if uri.query().is_some() {
        return Err(format!("{url:?}: a base URL has no query"));
    }
    let port = authority.port_u16().unwrap_or(match scheme {
        Scheme::Http => 80,
        Scheme::Https => 443,
    });
    let host = authority.host();
    Ok(BaseUrl {
        scheme,
        authority: format!("{host}:{port}"),
        host: host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
        prefix: uri.path().trim_end_matches('/').to_string(),
    })
}

/// The TLS configuration for `https://`: the certificates of `ca_file` if given, else the
/// system bundle ([`CA_BUNDLE`], read once).
pub fn tls_config(ca_file: Option<&Path>) -> Result<Arc<rustls::ClientConfig>, String> {
    static SYSTEM: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    match ca_file {
        Some(path) => config_with_roots(roots_from(path)?),
        None => SYSTEM
            .get_or_init(|| config_with_roots(system_roots()?))
            .clone(),
    }
}

fn config_with_roots(roots: rustls::RootCertStore) -> Result<Arc<rustls::ClientConfig>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The system CA bundle's certificates.
pub fn system_roots() -> Result<rustls::RootCertStore, String> {
    roots_from(Path::new(CA_BUNDLE)).map_err(|e| format!("TLS verify: {e}"))
}

fn roots_from(path: &Path) -> Result<rustls::RootCertStore, String> {
    use rustls::pki_types::pem::PemObject;
    let bytes = crate::files::read_limited(path, 16 << 20)
        .map_err(|e| format!("CA file {}: {e}", path.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_slice_iter(&bytes).flatten() {
        let _ = roots.add(cert);
    }
    if roots.is_empty() {
        return Err(format!("no certificate in {}", path.display()));
    }
    Ok(roots)
}

/// One request: method, path (below the base URL's prefix, with its query), extra headers
/// (`Name: value`) and a body (sent with a JSON content type if not empty and the headers
/// name none).
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub headers: &'a [String],
    pub body: &'a [u8],
}

/// Sends one request to `host` (`name:port` or `ip:port`) over plain HTTP, blocking.
/// At most `max_response` bytes of body are accepted.
pub fn request(
    host: &str,
    method: &str,
    path: &str,
    headers: &[String],
    body: &[u8],
    timeout: Duration,
    max_response: u64,
) -> Result<Response, HttpError> {
    let request = Request {
        method,
        path,
        headers,
        body,
    };
    request_url(&BaseUrl::plain(host), None, request, timeout, max_response)
}

/// [`send`] for blocking callers: on a current-thread runtime of its own.
pub fn request_url(
    base: &BaseUrl,
    tls: Option<&Arc<rustls::ClientConfig>>,
    request: Request<'_>,
    timeout: Duration,
    max_response: u64,
) -> Result<Response, HttpError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| HttpError::Io {
            addr: base.authority.clone(),
            source,
        })?;
    runtime.block_on(send(base, tls, request, timeout, max_response))
}

/// Sends one request to `base` (its prefix before `request.path`); `tls` is required for
/// `https://` (see [`tls_config`]). The whole exchange is bounded by `timeout`.
pub async fn send(
    base: &BaseUrl,
    tls: Option<&Arc<rustls::ClientConfig>>,
    request: Request<'_>,
    timeout: Duration,
    max_response: u64,
) -> Result<Response, HttpError> {
    let deadline = tokio::time::Instant::now() + timeout;
    // A connect that times out is still a connect error (the CLI's "is steerdns running?").
    let stream = tokio::time::timeout_at(deadline, connect(&base.authority))
        .await
        .map_err(|_| HttpError::Connect {
            addr: base.authority.clone(),
            source: std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"),
        })??;
    let exchange = send_over(stream, base, tls, request, BodyLimit::Refuse(max_response));
    tokio::time::timeout_at(deadline, exchange)
        .await
        .map_err(|_| HttpError::Timeout {
            addr: base.authority.clone(),
            timeout,
        })?
}

/// How much of a response body is read, and what a longer one is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLimit {
    /// A longer body is an error ([`HttpError::TooLarge`]).
    Refuse(u64),
    /// The body is its first bytes, the rest is not read; and a connection that ends before
    /// the announced end of the body (a TLS server that closes without close_notify) ends the
    /// body. For a health check, which judges the status and the start of the body.
    Truncate(u64),
}

/// [`send`] over a connection the caller opened (the health checks resolve names through their
/// own bounded lookups). Not bounded in time: the caller bounds it.
pub async fn send_over(
    stream: TcpStream,
    base: &BaseUrl,
    tls: Option<&Arc<rustls::ClientConfig>>,
    request: Request<'_>,
    limit: BodyLimit,
) -> Result<Response, HttpError> {
    match base.scheme {
        Scheme::Http => exchange(stream, base, request, limit).await,
        Scheme::Https => {
            let tls_error = |reason: String| HttpError::Tls {
                addr: base.authority.clone(),
                reason,
            };
            let config = match tls {
                Some(config) => config.clone(),
                None => tls_config(None).map_err(tls_error)?,
            };
            let name = rustls::pki_types::ServerName::try_from(base.host.clone())
                .map_err(|e| tls_error(format!("server name {:?}: {e}", base.host)))?;
            let stream = tokio_rustls::TlsConnector::from(config)
                .connect(name, stream)
                .await
                .map_err(|e| tls_error(e.to_string()))?;
            exchange(stream, base, request, limit).await
        }
    }
}

async fn connect(authority: &str) -> Result<TcpStream, HttpError> {
    let addrs: Vec<_> = tokio::net::lookup_host(authority)
        .await
        .map_err(|e| HttpError::Resolve {
            host: authority.to_string(),
            reason: e.to_string(),
        })?
        .collect();
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => return Ok(stream),
            Err(e) => last = Some(e),
        }
    }
    Err(HttpError::Connect {
        addr: authority.to_string(),
        source: last.unwrap_or_else(|| std::io::Error::other("no address")),
    })
}

async fn exchange<S>(
    stream: S,
    base: &BaseUrl,
    request: Request<'_>,
    limit: BodyLimit,
) -> Result<Response, HttpError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let http_error = |what: String| HttpError::Http {
        addr: base.authority.clone(),
        what,
    };
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| http_error(e.to_string()))?;
    // Drives the connection until the response is read; dropped with this future.
    let driver = async move {
        let _ = connection.await;
    };
    let mut builder = hyper::Request::builder()
        .method(request.method)
        .uri(format!("{}{}", base.prefix, request.path))
        .header(http::header::HOST, base.host_header())
        .header(http::header::CONNECTION, "close");
    let typed = request.headers.iter().any(|h| {
        h.split_once(':')
            .is_some_and(|(name, _)| name.trim().eq_ignore_ascii_case("content-type"))
    });
    if !request.body.is_empty() && !typed {
        builder = builder.header(http::header::CONTENT_TYPE, "application/json");
    }
    for header in request.headers {
        let Some((name, value)) = header.split_once(':') else {
            return Err(http_error(format!("malformed header line {header:?}")));
        };
        builder = builder.header(name.trim(), value.trim());
    }
    let outgoing = builder
        .body(Full::new(Bytes::copy_from_slice(request.body)))
        .map_err(|e| http_error(format!("bad request: {e}")))?;
    let receive = async {
        let response = sender
            .send_request(outgoing)
            .await
            .map_err(|e| http_error(e.to_string()))?;
        let status = response.status().as_u16();
        let body = read_body(response.into_body(), limit, &base.authority).await?;
        Ok(Response {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    };
    tokio::pin!(driver, receive);
    // The connection may finish first (the whole answer handed to the body); a connection
    // that fails shows as an error of `send_request` or of the body.
    tokio::select! {
        result = &mut receive => result,
        () = &mut driver => receive.await,
    }
}

/// Reads the body of a response within `limit`.
async fn read_body(
    mut body: hyper::body::Incoming,
    limit: BodyLimit,
    addr: &str,
) -> Result<Vec<u8>, HttpError> {
    let (max, truncate) = match limit {
        BodyLimit::Refuse(max) => (max, false),
        BodyLimit::Truncate(max) => (max, true),
    };
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    let mut read = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = match frame {
            Ok(frame) => frame,
            Err(e) if truncate && ended_early(&e) => break,
            Err(e) => {
                return Err(HttpError::Http {
                    addr: addr.to_string(),
                    what: e.to_string(),
                })
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let room = max - read.len();
        if data.len() > room {
            if !truncate {
                return Err(HttpError::TooLarge {
                    addr: addr.to_string(),
                    limit: max as u64,
                });
            }
            read.extend_from_slice(&data[..room]);
            break;
        }
        read.extend_from_slice(&data);
    }
    Ok(read)
}

/// The connection ended before the body did (an unexpected end of file somewhere in the
/// error's chain of causes).
fn ended_early(error: &hyper::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::UnexpectedEof {
                return true;
            }
        }
        cause = e.source();
    }
    error.is_incomplete_message()
}

/// Percent-encodes a query-string value (RFC 3986 unreserved characters pass).
pub fn encode_query_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base_urls_are_parsed_by_scheme() {
        let url = parse_base_url("http://prom.internal/prefix/").unwrap();
        assert_eq!(
            (url.scheme, url.authority.as_str(), url.prefix.as_str()),
            (Scheme::Http, "prom.internal:80", "/prefix")
        );
        let url = parse_base_url("https://[::1]:9443").unwrap();
        assert_eq!(
            (url.scheme, url.authority.as_str(), url.host.as_str()),
            (Scheme::Https, "[::1]:9443", "::1")
        );
        assert_eq!(
            parse_base_url("https://prom").unwrap().authority,
            "prom:443"
        );
        for bad in [
            "http://",
            "ftp://x",
            "prom:9090",
            "http://u@x:1",
            "http://x/?a=b",
        ] {
            assert!(parse_base_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn encodes_promql_for_a_query_string() {
        assert_eq!(
            encode_query_value("sum by (region) (rate(x{a=\"b c\"}[1m]))"),
            "sum%20by%20%28region%29%20%28rate%28x%7Ba%3D%22b%20c%22%7D%5B1m%5D%29%29"
        );
    }

    #[test]
    fn a_closed_port_is_a_connect_error() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let error = request(
            &addr.to_string(),
            "GET",
            "/",
            &[],
            b"",
            Duration::from_secs(2),
            1024,
        )
        .unwrap_err();
        assert!(matches!(error, HttpError::Connect { .. }), "{error}");
    }

    #[test]
    fn plain_and_chunked_answers_are_read_and_a_large_one_is_refused() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            for answer in [
                "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}",
                "HTTP/1.1 409 Conflict\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
                "HTTP/1.1 200 OK\r\ncontent-length: 2000\r\n\r\n",
            ] {
                let (mut conn, _) = listener.accept().unwrap();
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf).unwrap();
                conn.write_all(answer.as_bytes()).unwrap();
                if answer.ends_with("\r\n\r\n") && answer.contains("2000") {
                    conn.write_all(&[b'x'; 2000]).unwrap();
                }
            }
        });
        let get = || request(&addr, "GET", "/", &[], b"", Duration::from_secs(5), 1024);
        let r = get().unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, "{}"));
        let r = get().unwrap();
        assert_eq!((r.status, r.body.as_str()), (409, "abcde"));
        let error = get().unwrap_err();
        assert!(matches!(error, HttpError::TooLarge { .. }), "{error}");
        server.join().unwrap();
    }
}
