//! The operator CLI's requests to the admin endpoint on loopback, over
//! [`steerdns::http_client`]: one request per connection, bounded in time and size. Enough for
//! `steerdns status`, `reload` and the weight commands.

use std::time::Duration;

use anyhow::{Context, Result};

use steerdns::http_client::HttpError;
pub use steerdns::http_client::Response;

const TIMEOUT: Duration = Duration::from_secs(5);
const MAX_RESPONSE: u64 = 8 << 20;

/// Sends one request to `addr` (an address, or a `host:port` text); `token` becomes
/// `Authorization: Bearer`.
pub fn request(
    addr: impl std::fmt::Display,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
) -> Result<Response> {
    request_with(addr, method, path, token, &[], body)
}

/// [`request`] with more header lines (`Content-Type: …`).
pub fn request_with(
    addr: impl std::fmt::Display,
    method: &str,
    path: &str,
    token: Option<&str>,
    extra: &[String],
    body: &[u8],
) -> Result<Response> {
    let mut headers: Vec<String> = token
        .map(|t| format!("Authorization: Bearer {t}"))
        .into_iter()
        .collect();
    headers.extend_from_slice(extra);
    let result = steerdns::http_client::request(
        &addr.to_string(),
        method,
        path,
        &headers,
        body,
        TIMEOUT,
        MAX_RESPONSE,
    );
    match result {
        Err(e @ HttpError::Connect { .. }) => Err(e).with_context(|| {
            format!("cannot reach the admin endpoint at {addr} (is steerdns running?)")
        }),
        other => Ok(other?),
    }
}
