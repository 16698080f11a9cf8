//! A minimal HTTP/1.1 client: one request per connection (`Connection: close`), bounded in
//! time (connect, read and write each within the caller's timeout) and in response size; plain
//! and chunked bodies. Used by the operator CLI to reach the admin endpoint and by the shield's
//! Prometheus load source ([`crate::shield::prometheus`]); no TLS.
//!
//! Owns the wire exchange only: what a caller does with a status code is its business.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

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
    #[error("{addr}: {source}")]
    Io {
        addr: String,
        source: std::io::Error,
    },
    #[error("{addr}: malformed HTTP response ({what})")]
    Malformed { addr: String, what: &'static str },
}

/// Sends one request to `host` (`name:port` or `ip:port`); `headers` are extra header lines
/// (`Name: value`), `body` goes with a `Content-Length` (and a JSON content type if not empty).
/// At most `max_response` bytes of the response are read.
pub fn request(
    host: &str,
    method: &str,
    path: &str,
    headers: &[String],
    body: &[u8],
    timeout: Duration,
    max_response: u64,
) -> Result<Response, HttpError> {
    let addrs: Vec<SocketAddr> = host
        .to_socket_addrs()
        .map_err(|e| HttpError::Resolve {
            host: host.to_string(),
            reason: e.to_string(),
        })?
        .collect();
    let io = |source| HttpError::Io {
        addr: host.to_string(),
        source,
    };
    let mut last = None;
    let mut stream = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, timeout) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) => last = Some(e),
        }
    }
    let Some(mut stream) = stream else {
        return Err(HttpError::Connect {
            addr: host.to_string(),
            source: last.unwrap_or_else(|| std::io::Error::other("no address")),
        });
    };
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !body.is_empty() {
        head.push_str("Content-Type: application/json\r\n");
    }
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).map_err(io)?;
    stream.write_all(body).map_err(io)?;
    let mut raw = Vec::new();
    stream
        .take(max_response)
        .read_to_end(&mut raw)
        .map_err(io)?;
    parse_response(&raw).map_err(|what| HttpError::Malformed {
        addr: host.to_string(),
        what,
    })
}

fn parse_response(raw: &[u8]) -> Result<Response, &'static str> {
    let text = String::from_utf8_lossy(raw);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return Err("no end of the header");
    };
    let status = head
        .lines()
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or("no status line")?;
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase().starts_with("transfer-encoding:")
            && l.to_ascii_lowercase().contains("chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok(Response { status, body })
}

/// The body of a `Transfer-Encoding: chunked` message, its chunks joined (stops at the last
/// chunk or at the first malformed size).
pub fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
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
    fn parses_plain_and_chunked_responses() {
        let r = parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}").unwrap();
        assert_eq!((r.status, r.body.as_str()), (200, "{}"));
        let r = parse_response(b"HTTP/1.1 409 Conflict\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n").unwrap();
        assert_eq!((r.status, r.body.as_str()), (409, "abcde"));
        assert!(parse_response(b"garbage").is_err());
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
}
