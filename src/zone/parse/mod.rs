//! RFC 1035 §5 master-file loading that keeps the file and line of every record.
//!
//! We lex and parse the file structure ourselves (directives, owners, TTL/class, parentheses,
//! quoting, escapes) because hickory's zone parser drops line numbers and can panic on hostile
//! input. RDATA of name-bearing types is parsed here too (hickory's text parsers have no origin);
//! hickory is only used to turn the text of a few complex, name-free types into wire format.
//!
//! Every problem is collected (up to [`MAX_PROBLEMS`]) with its file and line; a file with any
//! error is refused as a whole.
//!
//! This module owns the public face (the parsed zone, its problems, loading a file or a
//! directory) and the limits. The work is done in steps, one file each: `lexer` (bytes →
//! entries), `entries` (entries → records and directives, `$INCLUDE` included), `fields` (one
//! token → a name, TTL, number, class or type) and `rdata` (a record's fields → wire).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hickory_proto::rr::{Name, RecordType};

mod entries;
mod fields;
mod lexer;
mod rdata;
#[cfg(test)]
mod tests;

use entries::{parse_zone_bytes_within, Budget};
use fields::parse_name;
use lexer::Token;

/// Parsing stops once this many problems have been collected for one zone.
pub const MAX_PROBLEMS: usize = 100;
/// How deep `$INCLUDE` may nest.
pub const MAX_INCLUDE_DEPTH: usize = 8;
/// How many `$INCLUDE`s one zone may read in all (each time a file is included counts): depth
/// alone lets ten includes per file read 10^8 files.
pub const MAX_INCLUDED_FILES: usize = 1024;
/// How many bytes one zone may read in all, its own file and every included one together.
pub const MAX_ZONE_TOTAL_BYTES: u64 = MAX_ZONE_FILE_BYTES;
/// RFC 2181 §8: a TTL is an unsigned number from 0 to 2^31-1.
pub const MAX_TTL: u32 = 0x7fff_ffff;
/// Refuse absurd files before reading them into memory.
pub const MAX_ZONE_FILE_BYTES: u64 = 512 * 1024 * 1024;
/// RFC 1035 §2.3.4.
const MAX_LABEL_OCTETS: usize = 63;
const MAX_NAME_OCTETS: usize = 255;
const MAX_CHAR_STRING_OCTETS: usize = 255;
const MAX_RDATA_OCTETS: usize = 65535;

/// A zone file's bytes as read, shared (an `Arc` of the buffer read: no copy).
pub type Text = Arc<Vec<u8>>;

/// One resource record as written in a zone file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceRecord {
    /// Fully qualified owner name, letter case as written.
    pub name: Name,
    pub rtype: RecordType,
    pub ttl: u32,
    /// RDATA in wire format; domain names uncompressed, letter case as written.
    pub rdata: Vec<u8>,
    /// The file the record came from (the included file for `$INCLUDE`d records).
    pub file: Arc<PathBuf>,
    /// 1-based line where the record starts.
    pub line: u32,
}

/// A zone file that parsed without errors (it may still fail [`super::validate::validate`]).
#[derive(Debug, Clone)]
pub struct ParsedZone {
    pub origin: Name,
    pub path: PathBuf,
    pub records: Vec<SourceRecord>,
    /// Every file read for this zone (the zone file, then each `$INCLUDE`d file) and what it
    /// held, so that a reload can tell whether anything changed.
    pub sources: Vec<(PathBuf, crate::files::Digest)>,
    /// The zone file's bytes as read, kept when a load asks for them so that the next
    /// reload can find what an edit changed without parsing ([`super::difference`]).
    pub text: Option<Text>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Severity {
    Error,
    Warning,
}

impl fmt::Display for Severity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
        })
    }
}

/// Something wrong in a zone file, with where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneProblem {
    pub file: PathBuf,
    /// 1-based line; 0 means the whole file.
    pub line: u32,
    pub severity: Severity,
    pub message: String,
}

impl ZoneProblem {
    pub fn error(file: impl Into<PathBuf>, line: u32, message: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            line,
            severity: Severity::Error,
            message: message.into(),
        }
    }

    pub fn warning(file: impl Into<PathBuf>, line: u32, message: impl Into<String>) -> Self {
        Self {
            file: file.into(),
            line,
            severity: Severity::Warning,
            message: message.into(),
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for ZoneProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(
                f,
                "{}: {}: {}",
                self.file.display(),
                self.severity,
                self.message
            )
        } else {
            let (file, line, severity) = (self.file.display(), self.line, self.severity);
            write!(f, "{file}:{line}: {severity}: {}", self.message)
        }
    }
}

impl std::error::Error for ZoneProblem {}

/// Presentation name of a record type; unknown types as RFC 3597 `TYPEnnn`.
pub fn type_text(rtype: RecordType) -> String {
    match rtype {
        RecordType::Unknown(code) => format!("TYPE{code}"),
        known => known.to_string(),
    }
}

/// Parses zone text that claims to come from `path` (used for messages and `$INCLUDE`).
pub fn parse_zone_text(
    text: &str,
    path: &Path,
    origin: &Name,
) -> Result<ParsedZone, Vec<ZoneProblem>> {
    parse_zone_bytes(text.as_bytes(), path, origin)
}

/// Reads and parses one zone file.
pub fn load_zone_file(path: &Path, origin: &Name) -> Result<ParsedZone, Vec<ZoneProblem>> {
    match read_zone_bytes(path) {
        Ok(bytes) => {
            let mut zone = parse_zone_bytes(&bytes, path, origin)?;
            zone.text = Some(Arc::new(bytes));
            Ok(zone)
        }
        Err(message) => Err(vec![ZoneProblem::error(path, 0, message)]),
    }
}

/// `zones/example.com.zone` → `example.com.`; `None` if the name does not end in `.zone` or
/// what precedes it is not a valid domain name.
pub fn origin_from_file_name(path: &Path) -> Option<Name> {
    let file_name = path.file_name()?.to_str()?;
    let stem = file_name.strip_suffix(".zone")?;
    if stem.is_empty() || stem.starts_with('.') {
        return None;
    }
    let absolute = if stem.ends_with('.') {
        stem.to_string()
    } else {
        format!("{stem}.")
    };
    let token = Token {
        text: absolute.into_bytes(),
        quoted: false,
        line: 0,
        glued: false,
    };
    parse_name(&token, &Name::root()).ok()
}

/// Loads every `*.zone` file in `dir` (sorted by path). Files that fail to parse, duplicate
/// origins and an unreadable directory are reported as problems; nothing panics.
pub fn load_zone_dir(dir: &Path) -> (Vec<ParsedZone>, Vec<ZoneProblem>) {
    let mut zones: Vec<ParsedZone> = Vec::new();
    let mut problems = Vec::new();
    let mut seen: Vec<(Name, PathBuf)> = Vec::new();
    let paths = match zone_files_in(dir) {
        Ok(paths) => paths,
        Err(message) => return (zones, vec![ZoneProblem::error(dir, 0, message)]),
    };
    for path in paths {
        let Some(origin) = origin_from_file_name(&path) else {
            let message = "cannot derive the zone name from the file name (expected <zone>.zone)";
            problems.push(ZoneProblem::error(&path, 0, message));
            continue;
        };
        // Checked against every earlier file, loaded or not, so a broken file cannot hide a
        // duplicate.
        if let Some((_, earlier)) = seen.iter().find(|(seen_origin, _)| *seen_origin == origin) {
            let message = format!("zone {origin} is also loaded from {}", earlier.display());
            problems.push(ZoneProblem::error(&path, 0, message));
            continue;
        }
        seen.push((origin.clone(), path.clone()));
        match load_zone_file(&path, &origin) {
            Ok(zone) => zones.push(zone),
            Err(found) => problems.extend(found),
        }
    }
    (zones, problems)
}

/// The `*.zone` files in `dir`, sorted by path (the files [`load_zone_dir`] loads).
pub fn zone_files_in(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read zone directory {}: {e}", dir.display()))?;
    let mut paths = Vec::new();
    for entry in entries {
        let entry =
            entry.map_err(|e| format!("cannot list zone directory {}: {e}", dir.display()))?;
        let path = entry.path();
        let is_zone = path.extension().is_some_and(|ext| ext == "zone");
        // Follows symlinks on purpose: deployments often link zone files into place.
        if is_zone && path.is_file() {
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

fn read_zone_bytes(path: &Path) -> Result<Vec<u8>, String> {
    crate::files::read_limited(path, MAX_ZONE_FILE_BYTES)
        .map_err(|e| format!("cannot read zone file: {e}"))
}

fn parse_zone_bytes(
    bytes: &[u8],
    path: &Path,
    origin: &Name,
) -> Result<ParsedZone, Vec<ZoneProblem>> {
    parse_zone_bytes_within(bytes, path, origin, Budget::default())
}
