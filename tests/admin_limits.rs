//! The admin endpoint refuses oversized request bodies (issue 8): 2 MiB to `POST /v1/load` or
//! `POST /v1/reload` is answered 413 (before authentication, so no token is needed to be
//! refused), and the endpoint keeps serving afterwards.

mod common;
mod hostile_common;

use common::TempConfig;
use hostile_common::*;

const OVERSIZED: usize = 2 << 20;

#[test]
fn oversized_bodies_are_refused_with_413() {
    let config = TempConfig::new("admin-limits", "");
    let (_server, admin) = start_with_admin(&config, &[]);
    for path in ["/v1/load", "/v1/reload"] {
        let (code, text) = http(admin, "POST", path, vec![b' '; OVERSIZED]);
        assert_eq!(code, 413, "POST {path} with 2 MiB: {text}");
    }
    // A small body is not refused for its size (here: no token configured, so 403).
    let (code, text) = http(admin, "POST", "/v1/reload", b"{}".to_vec());
    assert_eq!(code, 403, "{text}");
    let (code, _) = http(admin, "GET", "/v1/status", Vec::new());
    assert_eq!(code, 200, "still serving after refusing");
}
