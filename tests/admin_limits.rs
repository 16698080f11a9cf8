//! The admin endpoint refuses oversized request bodies (issue 8): 2 MiB to `POST /v1/load` or
//! `POST /v1/reload` is answered 413 with the token, and refused before the body is read
//! without it (issue 12: authorize first); the endpoint keeps serving afterwards.

mod common;
mod hostile_common;

use common::TempConfig;
use hostile_common::*;

const OVERSIZED: usize = 2 << 20;

#[test]
fn oversized_bodies_are_refused_with_413() {
    use std::os::unix::fs::PermissionsExt;
    const TOKEN: &str = "admin-limits-token-0123456789abcdef";
    let config = TempConfig::new("admin-limits", "[admin]\ntoken_file = \"admin.token\"\n");
    let token_file = config.dir().join("admin.token");
    std::fs::write(&token_file, TOKEN).expect("write token");
    std::fs::set_permissions(&token_file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let (_server, admin) = start_with_admin(&config, &[]);
    let auth = format!("Authorization: Bearer {TOKEN}\r\n");
    for path in ["/v1/load", "/v1/reload"] {
        let (code, text) = http_with(admin, "POST", path, &auth, vec![b' '; OVERSIZED]);
        assert_eq!(code, 413, "POST {path} with 2 MiB: {text}");
        let (code, text) = http(admin, "POST", path, vec![b' '; OVERSIZED]);
        assert_eq!(code, 401, "POST {path} with 2 MiB and no token: {text}");
    }
    // A small body is not refused for its size.
    let (code, text) = http_with(admin, "POST", "/v1/reload", &auth, b"{}".to_vec());
    assert_eq!(code, 200, "{text}");
    let (code, _) = http(admin, "GET", "/v1/status", Vec::new());
    assert_eq!(code, 200, "still serving after refusing");
}
