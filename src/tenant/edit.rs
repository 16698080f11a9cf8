//! Edits of a tenant document's text that keep everything else as written (comments, order):
//! today its `state`, for `steerdns tenant quarantine` / `release` and their API. Pure.

use toml_edit::{value, DocumentMut};

use super::document::TenantState;

/// The tenant document's text is not TOML, so its `state` cannot be set in it.
#[derive(Debug, thiserror::Error)]
#[error("the tenant document is not TOML: {0}")]
pub struct NotToml(#[source] toml_edit::TomlError);

/// `text` with `state = "<state>"` set, or the `state` key removed for `active` (the
/// default): a release leaves the document as it was before its quarantine. Refused when
/// the text is not TOML (the write would be refused anyway; this says so before it).
pub fn set_state(text: &str, state: TenantState) -> Result<String, NotToml> {
    let mut doc: DocumentMut = text.parse().map_err(NotToml)?;
    match state {
        TenantState::Active => {
            doc.remove("state");
        }
        other => {
            // A key added to a document with tables is written before them (toml_edit writes
            // a table's plain values first), so it stays a top-level key.
            doc["state"] = value(other.as_str());
        }
    }
    Ok(doc.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quarantine_and_release_round_trip_the_document() {
        let text = "# fabrikam\nnames = [\"fabrikam.edge.example.net.\"] # theirs\nttl = 60\n";
        let quarantined = set_state(text, TenantState::Quarantined).unwrap_or_default();
        assert!(
            quarantined.contains("state = \"quarantined\""),
            "{quarantined}"
        );
        assert!(quarantined.contains("# theirs"));
        let parsed = crate::tenant::parse("fabrikam.toml", &quarantined);
        let state = parsed
            .ok()
            .and_then(|p| p.document.state.map(|s| *s.get_ref()));
        assert_eq!(state, Some(TenantState::Quarantined));
        let released = set_state(&quarantined, TenantState::Active).unwrap_or_default();
        assert_eq!(released, text, "release leaves the document as before");
        let suspended = "names = [\"a.edge.example.net.\"]\nstate = \"suspended\"\n";
        let q = set_state(suspended, TenantState::Quarantined).unwrap_or_default();
        assert_eq!(q.matches("state =").count(), 1, "{q}");
        assert!(set_state("names = [", TenantState::Quarantined).is_err());
    }

    #[test]
    fn the_state_stays_a_top_level_key_in_a_document_with_tables() {
        let text = "names = [\"a.edge.example.net.\"]\n[breakglass]\nfrontdoor = 0\n";
        let out = set_state(text, TenantState::Quarantined).unwrap_or_default();
        let parsed: Result<toml::Table, _> = toml::from_str(&out);
        let state = parsed.ok().and_then(|t| t.get("state").cloned());
        assert_eq!(state, Some(toml::Value::from("quarantined")), "{out}");
    }
}
