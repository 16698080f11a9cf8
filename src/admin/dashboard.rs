//! The live dashboard: `GET /` and its two assets, a read-only picture of the rings (frontend
//! regions and fallback sites with utilisation, watermarks, shed fractions and destinations),
//! the profile weights, the control plane's serial and last refusal, and the tenants (how many,
//! which are refused and why; a refused tenant is also an alert).
//!
//! Owns the page and how it is served. Everything is embedded in the binary (no CDN, no
//! external fonts or scripts) and the script only reads `GET /v1/status` (a relative URL, every
//! 1.5 s), so the page changes nothing: break-glass stays in the CLI. It may not touch status
//! itself ([`super::status_view`] is the one source of truth) nor any write route.

use axum::http::header::{
    CACHE_CONTROL, CONTENT_SECURITY_POLICY, CONTENT_TYPE, REFERRER_POLICY, X_CONTENT_TYPE_OPTIONS,
    X_FRAME_OPTIONS,
};
use axum::http::HeaderName;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

/// Only this origin's own files and `fetch` to itself; no inline script or style, no frames,
/// no forms, no plugins. The script sets bar widths through the CSSOM, which this allows.
pub const CONTENT_SECURITY_POLICY_VALUE: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; font-src 'none'; object-src 'none'; \
     base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Where the assets are served; `index.html` names them relative to `/`.
pub const SCRIPT_PATH: &str = "/dashboard/app.js";
pub const STYLE_PATH: &str = "/dashboard/style.css";

const INDEX_HTML: &str = include_str!("dashboard/index.html");
const APP_JS: &str = include_str!("dashboard/app.js");
const STYLE_CSS: &str = include_str!("dashboard/style.css");

/// The dashboard's routes, to merge into the admin router (they need no state).
pub fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(page))
        .route(SCRIPT_PATH, get(script))
        .route(STYLE_PATH, get(style))
}

/// `GET /`: the page.
pub async fn page() -> impl IntoResponse {
    embedded("text/html; charset=utf-8", INDEX_HTML)
}

/// `GET /dashboard/app.js`: the script that fetches status and draws it.
pub async fn script() -> impl IntoResponse {
    embedded("text/javascript; charset=utf-8", APP_JS)
}

/// `GET /dashboard/style.css`.
pub async fn style() -> impl IntoResponse {
    embedded("text/css; charset=utf-8", STYLE_CSS)
}

/// An embedded file with the same strict headers on every response (the assets too, so a
/// browser that opens one directly is held to the same policy).
fn embedded(
    content_type: &'static str,
    body: &'static str,
) -> ([(HeaderName, &'static str); 6], &'static str) {
    (
        [
            (CONTENT_TYPE, content_type),
            (CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY_VALUE),
            (X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (X_FRAME_OPTIONS, "DENY"),
            (REFERRER_POLICY, "no-referrer"),
            // Small and compiled in: a new binary must not be shadowed by an old cached page.
            (CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `src="…"` / `href="…"` value in the page.
    fn references(html: &str) -> Vec<&str> {
        let mut found = Vec::new();
        for attribute in ["src=\"", "href=\""] {
            let mut rest = html;
            while let Some(start) = rest.find(attribute) {
                let after = &rest[start + attribute.len()..];
                let end = after.find('"').unwrap_or(after.len());
                found.push(&after[..end]);
                rest = &after[end..];
            }
        }
        found
    }

    #[test]
    fn the_page_loads_only_its_own_embedded_assets() {
        let references = references(INDEX_HTML);
        assert!(!references.is_empty(), "the page names no assets");
        for reference in &references {
            let absolute = format!("/{reference}");
            assert!(
                [SCRIPT_PATH, STYLE_PATH].contains(&absolute.as_str()),
                "index.html loads {reference:?}, which the dashboard does not serve"
            );
        }
        assert!(references.contains(&&SCRIPT_PATH[1..]));
        assert!(references.contains(&&STYLE_PATH[1..]));
    }

    #[test]
    fn nothing_embedded_reaches_outside_the_origin() {
        for (name, text) in [
            ("index.html", INDEX_HTML),
            ("app.js", APP_JS),
            ("style.css", STYLE_CSS),
        ] {
            for outside in ["http://", "https://", "@import", "url("] {
                assert!(
                    !text.contains(outside),
                    "{name} contains {outside:?}: the dashboard must be self-contained"
                );
            }
        }
    }

    /// ` onclick=`, ` onload=`, …: an attribute name starting with "on" followed by `=`.
    fn has_event_handler_attribute(html: &str) -> bool {
        html.match_indices(" on").any(|(at, _)| {
            let name: String = html[at + 3..]
                .chars()
                .take_while(char::is_ascii_lowercase)
                .collect();
            !name.is_empty() && html[at + 3 + name.len()..].starts_with('=')
        })
    }

    #[test]
    fn the_page_has_no_inline_script_or_style_the_policy_would_block() {
        assert!(!INDEX_HTML.contains("<style"));
        assert!(!INDEX_HTML.contains(" style=\""));
        assert!(
            !has_event_handler_attribute(INDEX_HTML),
            "inline event handler in index.html"
        );
        let scripts = INDEX_HTML.matches("<script").count();
        let external = INDEX_HTML.matches("<script src=").count();
        assert_eq!(scripts, external, "inline <script> in index.html");
    }

    #[test]
    fn the_script_reads_status_by_a_relative_url_and_never_writes() {
        assert!(APP_JS.contains("\"v1/status\""));
        for write in ["POST", "PUT", "DELETE", "PATCH", "innerHTML", "eval("] {
            assert!(!APP_JS.contains(write), "app.js contains {write:?}");
        }
    }

    #[test]
    fn the_policy_allows_only_this_origin() {
        let policy = CONTENT_SECURITY_POLICY_VALUE;
        assert!(policy.starts_with("default-src 'self';"));
        assert!(!policy.contains("unsafe"));
        assert!(!policy.contains('*'));
    }
}
