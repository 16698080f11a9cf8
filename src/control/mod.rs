//! The control file: the live knobs operators turn during an incident (weights, endpoint
//! enable/disable, region drains and forced answers, shield mode), kept apart from the static
//! config so that a break-glass change touches nothing else.
//!
//! Owns reading and checking the file. Compiling the knobs into policies (and refusing a change
//! that leaves a profile with nothing to serve) is the snapshot's job, through the same path as
//! every other change. Beside it: [`edit`] (the CLI's comment-preserving edits), [`history`]
//! (the accepted versions on disk) and [`summarize`] (how two versions differ, in one line).

pub mod edit;
pub mod history;
pub mod store;
mod summary;

pub use summary::summarize;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::policy::{CellKnobs, ControlKnobs, ProfileKnobs, RegionKnobs, ShieldMode};

/// The control file as written by operators (and by `steerdns weight set`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlFile {
    /// Operator-chosen version number; when absent steerdns numbers accepted versions itself.
    pub serial: Option<u64>,
    /// Traffic shield mode: "auto" (default), "frozen" or "off".
    #[serde(default)]
    pub shield: ShieldMode,
    /// Per profile: `[profiles.NAME.endpoints.ENDPOINT] weight = N, enabled = bool`.
    #[serde(default)]
    pub profiles: BTreeMap<String, ProfileKnobs>,
    /// Per region: `[regions.NAME] drain = bool, force = "global"|"regional"|"fallback:SITE"`.
    #[serde(default)]
    pub regions: BTreeMap<String, RegionKnobs>,
    /// Per cell: `[cells.LAYER.CELL] drain = bool` (LAYER: `global`, a region or a fallback
    /// site of `[topology.cells]`).
    #[serde(default)]
    pub cells: BTreeMap<String, BTreeMap<String, CellKnobs>>,
    /// Gates the safety rules look at (`[gates] break-glass = "armed"`); they change nothing
    /// that is served.
    #[serde(default)]
    pub gates: BTreeMap<String, String>,
    /// The safety rules this version was let through despite (`[[overrides]]`), with reason
    /// and who: recorded with the version, shown by `control history`. Serves nothing.
    #[serde(default)]
    pub overrides: Vec<Override>,
}

/// One safety-rule override recorded in a control version.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Override {
    /// The rule's id.
    pub rule: String,
    pub reason: String,
    /// Who overrode it (user@host, or the admin API's caller).
    pub by: String,
    /// When, RFC 3339 UTC.
    pub at: String,
}

#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    #[error("{path}: cannot read: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: the control file is empty (refusing: an empty file would reset every knob)")]
    Empty { path: PathBuf },
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

impl ControlFile {
    pub fn load(path: &Path) -> Result<ControlFile, ControlError> {
        let text = crate::files::read_text_limited(path, crate::files::SMALL_FILE_LIMIT).map_err(
            |source| ControlError::Read {
                path: path.to_path_buf(),
                source,
            },
        )?;
        ControlFile::parse(&text, path)
    }

    /// Parses control text; `path` names the file in errors. An empty (or comment-only) file
    /// is refused: it is far more likely a truncated write than an intent to reset everything.
    pub fn parse(text: &str, path: &Path) -> Result<ControlFile, ControlError> {
        let meaningful = text
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        if !meaningful {
            return Err(ControlError::Empty {
                path: path.to_path_buf(),
            });
        }
        toml::from_str(text).map_err(|e| {
            let (line, column) = e
                .span()
                .map(|span| crate::text_position::line_column(text, span.start))
                .unwrap_or((0, 0));
            ControlError::Syntax {
                path: path.to_path_buf(),
                line,
                column,
                message: e.message().trim().to_string(),
            }
        })
    }

    pub fn knobs(&self) -> ControlKnobs {
        ControlKnobs {
            profiles: self.profiles.clone(),
            regions: self.regions.clone(),
            cells: self.cells.clone(),
        }
    }
}

/// The 1-based line of a dotted field path (e.g. `profiles.warm.endpoints.frontdoor.weight`)
/// in control-file text: the deepest part of the path that exists.
/// Works for the config file too: `[n]` indexes arrays and arrays of tables, as in
/// `steered[0].profile` or `profiles.critical.endpoints[1].weight`.
pub fn line_of_field(text: &str, field: &str) -> Option<usize> {
    let doc = toml_edit::Document::parse(text).ok()?;
    let mut table: &dyn toml_edit::TableLike = doc.as_table();
    let mut span = None;
    for part in field.split('.') {
        let (key, indexes) = split_indexes(part);
        let Some((k, item)) = table.get_key_value(key) else {
            break;
        };
        span = item.span().or(k.span()).or(span);
        let mut item = item;
        let mut next_table: Option<&dyn toml_edit::TableLike> = item.as_table_like();
        for index in indexes {
            match item {
                toml_edit::Item::ArrayOfTables(tables) => match tables.get(index) {
                    Some(t) => {
                        span = t.span().or(span);
                        next_table = Some(t);
                    }
                    None => {
                        return span.map(|s| crate::text_position::line_column(text, s.start).0)
                    }
                },
                toml_edit::Item::Value(toml_edit::Value::Array(values)) => {
                    match values.get(index) {
                        Some(v) => {
                            span = v.span().or(span);
                            next_table =
                                v.as_inline_table().map(|t| t as &dyn toml_edit::TableLike);
                        }
                        None => {
                            return span.map(|s| crate::text_position::line_column(text, s.start).0)
                        }
                    }
                }
                _ => return span.map(|s| crate::text_position::line_column(text, s.start).0),
            }
            // Nested indexes on array elements are not used by our paths.
            item = &toml_edit::Item::None;
        }
        match next_table {
            Some(t) => table = t,
            None => break,
        }
    }
    span.map(|s| crate::text_position::line_column(text, s.start).0)
}

/// `"endpoints[1]"` -> `("endpoints", [1])`.
fn split_indexes(part: &str) -> (&str, Vec<usize>) {
    let key_end = part.find('[').unwrap_or(part.len());
    let indexes = part[key_end..]
        .split(['[', ']'])
        .filter_map(|n| n.parse().ok())
        .collect();
    (&part[..key_end], indexes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_weights_regions_and_mode() {
        let text = r#"
serial = 7
shield = "frozen"
[profiles.critical.endpoints]
frontdoor = { weight = 0 }
alt-cdn = { weight = 100 }
[regions.eu-west]
force = "fallback:fb-eu"
"#;
        let c = ControlFile::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(c.serial, Some(7));
        assert_eq!(c.shield, ShieldMode::Frozen);
        assert_eq!(
            c.profiles["critical"].endpoints["alt-cdn"].weight,
            Some(100)
        );
        assert!(c.regions["eu-west"].force.is_some());
    }

    #[test]
    fn indexed_paths_map_to_lines_in_arrays_of_tables() {
        let text = "[[steered]]\nname = \"a.\"\n\n[[steered]]\nname = \"b.\"\nprofile = \"x\"\n\n[profiles.p]\ntype = \"weighted\"\n[[profiles.p.endpoints]]\nname = \"e\"\nweight = 5\n[[profiles.p.endpoints]]\nname = \"f\"\nweight = 7\n";
        assert_eq!(line_of_field(text, "steered[1].profile"), Some(6));
        assert_eq!(line_of_field(text, "steered[0]"), Some(1));
        assert_eq!(
            line_of_field(text, "profiles.p.endpoints[1].weight"),
            Some(15)
        );
        assert_eq!(
            line_of_field(text, "profiles.p.endpoints[9].weight"),
            Some(10)
        );
    }

    #[test]
    fn field_paths_map_to_lines() {
        let text = "serial = 1\n[profiles.warm.endpoints]\nfrontdoor = { weight = 90 }\nalt = { weight = 2000 }\n[regions.eu-west]\ndrain = true\n";
        assert_eq!(
            line_of_field(text, "profiles.warm.endpoints.alt.weight"),
            Some(4)
        );
        assert_eq!(line_of_field(text, "regions.eu-west.drain"), Some(6));
        assert_eq!(line_of_field(text, "profiles.warm.endpoints.nope"), Some(2));
    }

    #[test]
    fn empty_and_comment_only_files_are_refused() {
        for text in ["", "\n\n", "# nothing\n"] {
            let err = ControlFile::parse(text, Path::new("c.toml")).unwrap_err();
            assert!(matches!(err, ControlError::Empty { .. }), "{err}");
        }
    }

    #[test]
    fn syntax_errors_name_line_and_column() {
        let err = ControlFile::parse(
            "serial = 1\n[regions.eu-west]\nforce = \"sideways\"\n",
            Path::new("c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("c.toml:3:9: "), "{err}");
        assert!(err.contains("sideways"), "{err}");
        let err = ControlFile::parse(
            "[profiles.x.endpoints]\ny = { weight = 1, colour = 2 }\n",
            Path::new("c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("c.toml:2:"), "{err}");
        assert!(err.contains("colour"), "{err}");
    }
}
