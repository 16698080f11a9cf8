//! RFC 1035 §5 master-file loading that keeps the file and line of every record.
//!
//! We lex and parse the file structure ourselves (directives, owners, TTL/class, parentheses,
//! quoting, escapes) because hickory's zone parser drops line numbers and can panic on hostile
//! input. RDATA of name-bearing types is parsed here too (hickory's text parsers have no origin);
//! hickory is only used to turn the text of a few complex, name-free types into wire format.
//!
//! Every problem is collected (up to [`MAX_PROBLEMS`]) with its file and line; a file with any
//! error is refused as a whole.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use hickory_proto::rr::{Name, RData, RecordType};
use hickory_proto::serialize::binary::{
    BinDecoder, BinEncodable, BinEncoder, NameEncoding, Restrict,
};

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
        Ok(bytes) => parse_zone_bytes(&bytes, path, origin),
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

fn parse_zone_bytes_within(
    bytes: &[u8],
    path: &Path,
    origin: &Name,
    budget: Budget,
) -> Result<ParsedZone, Vec<ZoneProblem>> {
    let mut origin = origin.clone();
    origin.set_fqdn(true);
    let mut parser = Parser {
        budget: Budget {
            bytes: budget.bytes.saturating_sub(bytes.len() as u64),
            ..budget
        },
        ..Parser::default()
    };
    if let Ok(canonical) = std::fs::canonicalize(path) {
        parser.include_stack.push(canonical);
    }
    let file = Arc::new(path.to_path_buf());
    parser
        .sources
        .push((path.to_path_buf(), crate::files::digest(bytes)));
    parser.parse_source(bytes, &file, origin.clone(), 0);
    if parser.problems.iter().any(ZoneProblem::is_error) {
        return Err(parser.problems);
    }
    Ok(ParsedZone {
        origin,
        path: path.to_path_buf(),
        records: parser.records,
        sources: parser.sources,
    })
}

// ---------------------------------------------------------------------------------------------
// Lexer: bytes → logical entries (one per record or directive; parentheses join lines).

#[derive(Debug, Clone, PartialEq, Eq)]
struct Token {
    /// Raw text: without the surrounding quotes, escapes not yet decoded.
    text: Vec<u8>,
    quoted: bool,
    line: u32,
    /// No blank separates it from the previous token (as in `alpn="h2,h3"`).
    glued: bool,
}

impl Token {
    fn shown(&self) -> String {
        String::from_utf8_lossy(&self.text).into_owned()
    }

    fn is(&self, word: &str) -> bool {
        !self.quoted && self.text.eq_ignore_ascii_case(word.as_bytes())
    }
}

#[derive(Debug)]
struct Entry {
    line: u32,
    /// The entry's first line starts with a non-blank, i.e. it names its owner.
    has_owner: bool,
    tokens: Vec<Token>,
}

/// A problem at a line of the file being lexed or parsed.
#[derive(Debug)]
struct Fault {
    line: u32,
    message: String,
}

fn fault(line: u32, message: impl Into<String>) -> Fault {
    Fault {
        line,
        message: message.into(),
    }
}

struct Lexer<'a> {
    src: &'a [u8],
    pos: usize,
    line: u32,
}

impl<'a> Lexer<'a> {
    fn new(src: &'a [u8]) -> Self {
        Self {
            src,
            pos: 0,
            line: 1,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    /// Next logical entry, `None` at the end of input.
    fn next_entry(&mut self) -> Option<Result<Entry, Fault>> {
        let mut tokens: Vec<Token> = Vec::new();
        let mut entry_line = self.line;
        let mut has_owner = false;
        let mut open_paren: Option<u32> = None;
        let mut at_line_start = true;
        loop {
            if at_line_start && open_paren.is_none() && tokens.is_empty() {
                entry_line = self.line;
                has_owner = self.peek().is_some_and(|b| !matches!(b, b' ' | b'\t'));
            }
            at_line_start = false;
            let glued_to_previous = !tokens.is_empty() && self.follows_text();
            let Some(byte) = self.peek() else {
                if let Some(opened) = open_paren {
                    return Some(Err(fault(opened, "'(' is never closed")));
                }
                return (!tokens.is_empty()).then_some(Ok(Entry {
                    line: entry_line,
                    has_owner,
                    tokens,
                }));
            };
            match byte {
                b'\n' => {
                    self.pos += 1;
                    self.line = self.line.saturating_add(1);
                    at_line_start = true;
                    if open_paren.is_none() && !tokens.is_empty() {
                        return Some(Ok(Entry {
                            line: entry_line,
                            has_owner,
                            tokens,
                        }));
                    }
                }
                b' ' | b'\t' | b'\r' => self.pos += 1,
                b';' => self.skip_to_line_end(),
                b'(' => {
                    self.pos += 1;
                    if open_paren.is_some() {
                        return Some(Err(
                            self.recover(fault(self.line, "nested '(' is not allowed"))
                        ));
                    }
                    open_paren = Some(self.line);
                }
                b')' => {
                    self.pos += 1;
                    if open_paren.take().is_none() {
                        return Some(Err(
                            self.recover(fault(self.line, "')' without a matching '('"))
                        ));
                    }
                }
                b'"' => match self.quoted() {
                    Ok(token) => tokens.push(Token {
                        glued: glued_to_previous,
                        ..token
                    }),
                    Err(problem) => return Some(Err(self.recover(problem))),
                },
                _ => match self.word() {
                    Ok(token) => tokens.push(Token {
                        glued: glued_to_previous,
                        ..token
                    }),
                    Err(problem) => return Some(Err(self.recover(problem))),
                },
            }
        }
    }

    /// The byte before the cursor belongs to a token (no blank in between).
    fn follows_text(&self) -> bool {
        let previous = self.pos.checked_sub(1).and_then(|i| self.src.get(i));
        previous.is_some_and(|b| !matches!(b, b' ' | b'\t' | b'\r' | b'\n' | b'(' | b')'))
    }

    /// After a lexing error, drop the rest of the physical line so parsing can go on.
    fn recover(&mut self, problem: Fault) -> Fault {
        self.skip_to_line_end();
        problem
    }

    fn skip_to_line_end(&mut self) {
        while self.peek().is_some_and(|b| b != b'\n') {
            self.pos += 1;
        }
    }

    fn quoted(&mut self) -> Result<Token, Fault> {
        let line = self.line;
        self.pos += 1; // opening quote
        let start = self.pos;
        loop {
            match self.peek() {
                None | Some(b'\n') => return Err(fault(line, "unterminated quoted string")),
                Some(b'"') => break,
                Some(b'\\') => {
                    self.pos += 1;
                    if matches!(self.peek(), None | Some(b'\n')) {
                        return Err(fault(
                            line,
                            "unterminated quoted string (ends in a backslash)",
                        ));
                    }
                    self.pos += 1;
                }
                Some(_) => self.pos += 1,
            }
        }
        let text = self.src[start..self.pos].to_vec();
        self.pos += 1; // closing quote
        Ok(Token {
            text,
            quoted: true,
            line,
            glued: false,
        })
    }

    fn word(&mut self) -> Result<Token, Fault> {
        let line = self.line;
        let start = self.pos;
        while let Some(byte) = self.peek() {
            match byte {
                b' ' | b'\t' | b'\r' | b'\n' | b';' | b'(' | b')' | b'"' => break,
                b'\\' => {
                    self.pos += 1;
                    // An escaped special character belongs to the word; a trailing backslash is
                    // reported when the word is decoded.
                    if self.peek().is_some_and(|b| b != b'\n') {
                        self.pos += 1;
                    }
                }
                control if control < 0x20 || control == 0x7f => {
                    return Err(fault(
                        line,
                        format!("control character 0x{control:02x} in the text"),
                    ));
                }
                _ => self.pos += 1,
            }
        }
        Ok(Token {
            text: self.src[start..self.pos].to_vec(),
            quoted: false,
            line,
            glued: false,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Field decoders.

/// Decodes `\X` and `\DDD` escapes of a token.
fn unescape(token: &Token) -> Result<Vec<u8>, Fault> {
    let raw = &token.text;
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] != b'\\' {
            out.push(raw[i]);
            i += 1;
            continue;
        }
        let (byte, used) = escape_at(raw, i).map_err(|msg| fault(token.line, msg))?;
        out.push(byte);
        i += used;
    }
    Ok(out)
}

/// The byte an escape starting at `raw[i] == b'\\'` stands for, and how many bytes it spans.
fn escape_at(raw: &[u8], i: usize) -> Result<(u8, usize), String> {
    let Some(&next) = raw.get(i + 1) else {
        return Err("a backslash at the end of a field escapes nothing".to_string());
    };
    if !next.is_ascii_digit() {
        return Ok((next, 2));
    }
    let digits = raw
        .get(i + 1..i + 4)
        .filter(|d| d.iter().all(u8::is_ascii_digit));
    let Some(digits) = digits else {
        return Err("bad escape: \\DDD needs exactly three decimal digits".to_string());
    };
    let value = digits
        .iter()
        .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'));
    let byte = u8::try_from(value).map_err(|_| format!("bad escape \\{value}: above 255"))?;
    Ok((byte, 4))
}

/// A domain name, relative names completed with `origin`, `@` meaning `origin`.
fn parse_name(token: &Token, origin: &Name) -> Result<Name, Fault> {
    let line = token.line;
    if token.quoted {
        return Err(fault(
            line,
            format!("domain name \"{}\" must not be quoted", token.shown()),
        ));
    }
    if token.text == b"@" {
        return Ok(origin.clone());
    }
    let (mut labels, absolute) = split_labels(token)?;
    if !absolute {
        labels.extend(origin.iter().map(<[u8]>::to_vec));
    }
    let wire_len: usize = labels.iter().map(|l| l.len() + 1).sum::<usize>() + 1;
    if wire_len > MAX_NAME_OCTETS {
        let shown = token.shown();
        return Err(fault(
            line,
            format!("domain name {shown} is {wire_len} octets long; the limit is 255"),
        ));
    }
    Name::from_labels(labels.iter().map(Vec::as_slice))
        .map_err(|e| fault(line, format!("bad domain name {}: {e}", token.shown())))
}

/// Splits presentation text into raw labels; `true` if it ends in an unescaped dot.
fn split_labels(token: &Token) -> Result<(Vec<Vec<u8>>, bool), Fault> {
    let raw = &token.text;
    let line = token.line;
    let shown = token.shown();
    if raw.as_slice() == b"." {
        return Ok((Vec::new(), true));
    }
    let mut labels = Vec::new();
    let mut label = Vec::new();
    let mut i = 0;
    while i < raw.len() {
        match raw[i] {
            b'.' => {
                if label.is_empty() {
                    return Err(fault(
                        line,
                        format!("domain name {shown} has an empty label"),
                    ));
                }
                labels.push(std::mem::take(&mut label));
                i += 1;
                continue;
            }
            b'\\' => {
                let (byte, used) = escape_at(raw, i).map_err(|msg| fault(line, msg))?;
                label.push(byte);
                i += used;
            }
            byte if !byte.is_ascii() => {
                let msg = format!(
                    "domain name {shown} has non-ASCII characters; write it in punycode (xn--)"
                );
                return Err(fault(line, msg));
            }
            byte => {
                label.push(byte);
                i += 1;
            }
        }
        if label.len() > MAX_LABEL_OCTETS {
            return Err(fault(
                line,
                format!("a label of {shown} is longer than 63 octets"),
            ));
        }
    }
    let absolute = label.is_empty();
    if !absolute {
        labels.push(label);
    }
    Ok((labels, absolute))
}

/// A TTL: seconds, or units such as `1h30m`, `2d`, `1w` (case-insensitive).
fn parse_ttl(token: &Token) -> Result<u32, Fault> {
    let shown = token.shown();
    let bad = || {
        fault(
            token.line,
            format!("bad TTL '{shown}': use seconds or units like 1h30m"),
        )
    };
    if token.quoted || token.text.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    let mut number: Option<u64> = None;
    for &byte in &token.text {
        if byte.is_ascii_digit() {
            let digit = u64::from(byte - b'0');
            let grown = number
                .unwrap_or(0)
                .checked_mul(10)
                .and_then(|n| n.checked_add(digit));
            number = Some(
                grown
                    .filter(|n| *n <= u64::from(u32::MAX))
                    .ok_or_else(|| too_big_ttl(token))?,
            );
            continue;
        }
        let unit: u64 = match byte.to_ascii_lowercase() {
            b's' => 1,
            b'm' => 60,
            b'h' => 3600,
            b'd' => 86_400,
            b'w' => 604_800,
            _ => return Err(bad()),
        };
        let count = number.take().ok_or_else(bad)?;
        total = total.saturating_add(count.saturating_mul(unit));
    }
    total = total.saturating_add(number.unwrap_or(0));
    u32::try_from(total)
        .ok()
        .filter(|ttl| *ttl <= MAX_TTL)
        .ok_or_else(|| too_big_ttl(token))
}

fn too_big_ttl(token: &Token) -> Fault {
    let shown = token.shown();
    fault(
        token.line,
        format!("TTL '{shown}' is above the limit of {MAX_TTL} seconds (RFC 2181)"),
    )
}

fn parse_number<T: TryFrom<u64>>(token: &Token, field: &str, max: u64) -> Result<T, Fault> {
    let shown = token.shown();
    let bad = || {
        fault(
            token.line,
            format!("{field} '{shown}' is not a number from 0 to {max}"),
        )
    };
    if token.quoted || token.text.is_empty() || !token.text.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let mut value: u64 = 0;
    for &digit in &token.text {
        value = value
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(digit - b'0')))
            .filter(|v| *v <= max)
            .ok_or_else(bad)?;
    }
    T::try_from(value).map_err(|_| bad())
}

fn parse_hex(tokens: &[Token], field: &str, line: u32) -> Result<Vec<u8>, Fault> {
    let mut digits = Vec::new();
    for token in tokens {
        if token.quoted {
            return Err(fault(token.line, format!("{field} must not be quoted")));
        }
        digits.extend_from_slice(&token.text);
    }
    if digits.len() % 2 != 0 {
        return Err(fault(
            line,
            format!("{field} has an odd number of hex digits"),
        ));
    }
    digits
        .chunks(2)
        .map(|pair| match (hex_value(pair[0]), hex_value(pair[1])) {
            (Some(high), Some(low)) => Ok(high << 4 | low),
            _ => Err(fault(line, format!("{field} is not hexadecimal"))),
        })
        .collect()
}

fn hex_value(digit: u8) -> Option<u8> {
    char::from(digit)
        .to_digit(16)
        .and_then(|v| u8::try_from(v).ok())
}

fn parse_class(token: &Token) -> Option<Result<(), Fault>> {
    const OTHER_CLASSES: [&str; 5] = ["CH", "HS", "CS", "NONE", "ANY"];
    if token.quoted {
        return None;
    }
    if token.is("IN") || token.is("CLASS1") {
        return Some(Ok(()));
    }
    let upper = token.shown().to_ascii_uppercase();
    let numbered = upper
        .strip_prefix("CLASS")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    if OTHER_CLASSES.contains(&upper.as_str()) || numbered {
        let message = format!("class {upper} is not supported; only class IN is served");
        return Some(Err(fault(token.line, message)));
    }
    None
}

fn parse_type(token: &Token) -> Result<RecordType, Fault> {
    let upper = token.shown().to_ascii_uppercase();
    let unknown = || {
        fault(
            token.line,
            format!("unknown record type '{}'", token.shown()),
        )
    };
    if token.quoted {
        return Err(unknown());
    }
    if let Some(code) = upper
        .strip_prefix("TYPE")
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    {
        let code = Token {
            text: code.as_bytes().to_vec(),
            quoted: false,
            line: token.line,
            glued: false,
        };
        return parse_number::<u16>(&code, "type number", u64::from(u16::MAX))
            .map(RecordType::from);
    }
    RecordType::from_str(&upper).map_err(|_| unknown())
}

/// Types that may not appear in a zone (RFC 6895 meta and query types) or that we refuse.
fn refused_type(rtype: RecordType) -> Option<String> {
    let code = u16::from(rtype);
    let name = type_text(rtype);
    if code == 0 || code == 41 || (128..=255).contains(&code) {
        return Some(format!(
            "type {name} is a query or meta type and cannot appear in a zone"
        ));
    }
    match rtype {
        RecordType::DNAME => Some("DNAME records are not supported".to_string()),
        RecordType::ANAME => {
            Some("ANAME records are not supported; use a steered name".to_string())
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// RDATA: text tokens → wire format.

/// Reads the RDATA fields of one record in order.
struct Fields<'t> {
    tokens: &'t [Token],
    next: usize,
    rtype: RecordType,
    line: u32,
}

impl<'t> Fields<'t> {
    fn take(&mut self, field: &str) -> Result<&'t Token, Fault> {
        let token = self.tokens.get(self.next).ok_or_else(|| {
            let rtype = type_text(self.rtype);
            fault(
                self.line,
                format!("{rtype} record is missing its {field} field"),
            )
        })?;
        self.next += 1;
        Ok(token)
    }

    fn rest(&mut self) -> &'t [Token] {
        let rest = &self.tokens[self.next.min(self.tokens.len())..];
        self.next = self.tokens.len();
        rest
    }

    fn finish(&self) -> Result<(), Fault> {
        match self.tokens.get(self.next) {
            None => Ok(()),
            Some(extra) => {
                let rtype = type_text(self.rtype);
                Err(fault(
                    extra.line,
                    format!("unexpected '{}' after the {rtype} data", extra.shown()),
                ))
            }
        }
    }

    fn u8(&mut self, field: &str) -> Result<u8, Fault> {
        parse_number(self.take(field)?, field, u64::from(u8::MAX))
    }

    fn u16(&mut self, field: &str) -> Result<u16, Fault> {
        parse_number(self.take(field)?, field, u64::from(u16::MAX))
    }

    fn u32(&mut self, field: &str) -> Result<u32, Fault> {
        parse_number(self.take(field)?, field, u64::from(u32::MAX))
    }

    /// SOA timers accept TTL-style units.
    fn timer(&mut self, field: &str) -> Result<u32, Fault> {
        let token = self.take(field)?;
        parse_ttl(token).map_err(|f| fault(f.line, format!("SOA {field}: {}", f.message)))
    }

    fn name(&mut self, field: &str, origin: &Name, wire: &mut Vec<u8>) -> Result<(), Fault> {
        let name = parse_name(self.take(field)?, origin)?;
        push_name(wire, &name);
        Ok(())
    }

    fn char_string(&mut self, field: &str, wire: &mut Vec<u8>) -> Result<(), Fault> {
        push_char_string(wire, self.take(field)?)
    }
}

fn push_name(wire: &mut Vec<u8>, name: &Name) {
    for label in name.iter() {
        // Labels are at most 63 octets (checked when the name was built).
        wire.push(u8::try_from(label.len()).unwrap_or(u8::MAX));
        wire.extend_from_slice(label);
    }
    wire.push(0);
}

fn push_char_string(wire: &mut Vec<u8>, token: &Token) -> Result<(), Fault> {
    let bytes = unescape(token)?;
    let Ok(len) = u8::try_from(bytes.len()) else {
        let (got, max) = (bytes.len(), MAX_CHAR_STRING_OCTETS);
        return Err(fault(token.line, format!("character string is {got} octets; the limit is {max} (split it into several strings)")));
    };
    wire.push(len);
    wire.extend_from_slice(&bytes);
    Ok(())
}

fn rdata_to_wire(
    rtype: RecordType,
    tokens: &[Token],
    origin: &Name,
    line: u32,
) -> Result<Vec<u8>, Fault> {
    if tokens
        .first()
        .is_some_and(|t| !t.quoted && t.text == b"\\#")
    {
        let data = generic_rdata(&tokens[1..], line)?;
        check_generic_wire(rtype, &data, line)?;
        return Ok(data);
    }
    let mut fields = Fields {
        tokens,
        next: 0,
        rtype,
        line,
    };
    let mut wire = Vec::new();
    match rtype {
        RecordType::A => {
            let token = fields.take("address")?;
            let address: Ipv4Addr = token
                .shown()
                .parse()
                .map_err(|_| fault(token.line, format!("bad IPv4 address '{}'", token.shown())))?;
            wire.extend_from_slice(&address.octets());
        }
        RecordType::AAAA => {
            let token = fields.take("address")?;
            let address: Ipv6Addr = token
                .shown()
                .parse()
                .map_err(|_| fault(token.line, format!("bad IPv6 address '{}'", token.shown())))?;
            wire.extend_from_slice(&address.octets());
        }
        RecordType::NS | RecordType::CNAME | RecordType::PTR => {
            fields.name("target", origin, &mut wire)?
        }
        RecordType::MX => {
            wire.extend_from_slice(&fields.u16("preference")?.to_be_bytes());
            fields.name("exchange", origin, &mut wire)?;
        }
        RecordType::SRV => {
            for field in ["priority", "weight", "port"] {
                wire.extend_from_slice(&fields.u16(field)?.to_be_bytes());
            }
            fields.name("target", origin, &mut wire)?;
        }
        RecordType::SOA => soa_to_wire(&mut fields, origin, &mut wire)?,
        RecordType::NAPTR => {
            wire.extend_from_slice(&fields.u16("order")?.to_be_bytes());
            wire.extend_from_slice(&fields.u16("preference")?.to_be_bytes());
            let flags_at = wire.len();
            fields.char_string("flags", &mut wire)?;
            // RFC 3403 §4.1: flags are single characters from A-Z and 0-9 (resolvers refuse
            // others; found by fuzzing against hickory's decoder).
            if !wire[flags_at + 1..].iter().all(u8::is_ascii_alphanumeric) {
                return Err(fault(
                    fields.line,
                    "NAPTR flags must be letters and digits only (RFC 3403)",
                ));
            }
            for field in ["services", "regexp"] {
                fields.char_string(field, &mut wire)?;
            }
            fields.name("replacement", origin, &mut wire)?;
        }
        RecordType::TXT => {
            fields.char_string("text", &mut wire)?;
            for token in fields.rest() {
                push_char_string(&mut wire, token)?;
            }
        }
        RecordType::HINFO => {
            fields.char_string("cpu", &mut wire)?;
            fields.char_string("os", &mut wire)?;
        }
        RecordType::CAA => caa_to_wire(&mut fields, &mut wire)?,
        RecordType::DS | RecordType::CDS => {
            wire.extend_from_slice(&fields.u16("key tag")?.to_be_bytes());
            wire.push(fields.u8("algorithm")?);
            wire.push(fields.u8("digest type")?);
            let digest = fields.rest();
            if digest.is_empty() {
                return Err(fault(line, "DS record is missing its digest field"));
            }
            wire.extend(parse_hex(digest, "DS digest", line)?);
        }
        RecordType::SVCB | RecordType::HTTPS => return svcb_to_wire(rtype, tokens, origin, line),
        _ => return hickory_to_wire(rtype, tokens, line),
    }
    fields.finish()?;
    Ok(wire)
}

fn soa_to_wire(fields: &mut Fields<'_>, origin: &Name, wire: &mut Vec<u8>) -> Result<(), Fault> {
    fields.name("primary name server", origin, wire)?;
    fields.name("responsible mailbox", origin, wire)?;
    wire.extend_from_slice(&fields.u32("serial")?.to_be_bytes());
    for field in ["refresh", "retry", "expire", "minimum"] {
        wire.extend_from_slice(&fields.timer(field)?.to_be_bytes());
    }
    Ok(())
}

/// RFC 8659: flags, tag (1-15 letters/digits), value (the rest of the RDATA, as written).
fn caa_to_wire(fields: &mut Fields<'_>, wire: &mut Vec<u8>) -> Result<(), Fault> {
    wire.push(fields.u8("flags")?);
    let tag = fields.take("tag")?;
    let tag_ok = !tag.quoted
        && (1..=15).contains(&tag.text.len())
        && tag.text.iter().all(u8::is_ascii_alphanumeric);
    if !tag_ok {
        return Err(fault(
            tag.line,
            format!(
                "CAA tag '{}' must be 1 to 15 letters or digits",
                tag.shown()
            ),
        ));
    }
    wire.push(u8::try_from(tag.text.len()).unwrap_or(0));
    wire.extend_from_slice(&tag.text);
    wire.extend(unescape(fields.take("value")?)?);
    Ok(())
}

/// RFC 3597: `\# <length> <hex>...`.
fn generic_rdata(tokens: &[Token], line: u32) -> Result<Vec<u8>, Fault> {
    let Some(length) = tokens.first() else {
        return Err(fault(line, "generic RDATA '\\#' needs a length"));
    };
    let length: usize = parse_number(length, "generic RDATA length", MAX_RDATA_OCTETS as u64)?;
    let data = parse_hex(&tokens[1..], "generic RDATA", line)?;
    if data.len() != length {
        let got = data.len();
        return Err(fault(
            line,
            format!("generic RDATA says {length} octets but has {got}"),
        ));
    }
    Ok(data)
}

/// Generic RDATA of a type hickory knows must decode as that type, so that `CNAME \# 1 00`
/// cannot slip a malformed record past validation.
fn check_generic_wire(rtype: RecordType, data: &[u8], line: u32) -> Result<(), Fault> {
    if matches!(rtype, RecordType::Unknown(_)) {
        return Ok(());
    }
    let Ok(length) = u16::try_from(data.len()) else {
        return Ok(()); // the RDATA size limit reports this
    };
    let decoded = std::panic::catch_unwind(|| {
        let mut decoder = BinDecoder::new(data);
        RData::read(&mut decoder, rtype, Restrict::new(length)).map(|_| ())
    });
    let name = type_text(rtype);
    match decoded {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(fault(
            line,
            format!("generic RDATA is not valid {name} data: {e}"),
        )),
        Err(_) => Err(fault(
            line,
            format!("generic RDATA is not valid {name} data"),
        )),
    }
}

/// SVCB/HTTPS: we make the target name absolute (hickory has no origin), then let hickory
/// parse the service parameters. Quoted values are passed unquoted, so a value with blanks in
/// it is refused (use the generic syntax for such exotic records).
fn svcb_to_wire(
    rtype: RecordType,
    tokens: &[Token],
    origin: &Name,
    line: u32,
) -> Result<Vec<u8>, Fault> {
    let mut rewritten: Vec<Token> = Vec::with_capacity(tokens.len());
    for token in tokens {
        match rewritten.last_mut() {
            // hickory wants `key=value` as one unquoted word: `alpn="h2,h3"` → `alpn=h2,h3`.
            Some(previous) if token.glued => previous.text.extend_from_slice(&token.text),
            _ => rewritten.push(Token {
                quoted: false,
                ..token.clone()
            }),
        }
    }
    if let Some(target) = rewritten.get_mut(1) {
        if target.text != b"." {
            let name = parse_name(target, origin)?;
            target.text = name.to_ascii().into_bytes();
        }
    }
    hickory_to_wire(rtype, &rewritten, line)
}

/// For name-free types whose text format hickory knows (SSHFP, TLSA, SVCB params, CERT...).
fn hickory_to_wire(rtype: RecordType, tokens: &[Token], line: u32) -> Result<Vec<u8>, Fault> {
    let text = tokens_to_text(tokens);
    let name = type_text(rtype);
    let generic_hint = "(RFC 3597 generic syntax '\\# <length> <hex>' works for any type)";
    // hickory's text parsers are third-party code fed with operator input; a panic in one of
    // them must become a zone problem, not take the loader down.
    let parsed = std::panic::catch_unwind(|| RData::try_from_str(rtype, &text));
    let rdata = match parsed {
        Ok(Ok(rdata)) => rdata,
        Ok(Err(e)) => {
            return Err(fault(
                line,
                format!("cannot parse {name} data: {e} {generic_hint}"),
            ))
        }
        Err(_) => {
            return Err(fault(
                line,
                format!("cannot parse {name} data {generic_hint}"),
            ))
        }
    };
    let mut wire = Vec::new();
    let mut encoder = BinEncoder::new(&mut wire);
    encoder.set_name_encoding(NameEncoding::Uncompressed);
    rdata
        .emit(&mut encoder)
        .map_err(|e| fault(line, format!("cannot encode {name} data: {e}")))?;
    Ok(wire)
}

/// Re-assembles tokens for hickory's own lexer (quotes restored, escapes left as written).
fn tokens_to_text(tokens: &[Token]) -> String {
    let words: Vec<String> = tokens
        .iter()
        .map(|t| {
            if t.quoted {
                format!("\"{}\"", t.shown())
            } else {
                t.shown()
            }
        })
        .collect();
    words.join(" ")
}

// ---------------------------------------------------------------------------------------------
// Parser: entries → records, directives, problems.

#[derive(Default)]
struct Parser {
    records: Vec<SourceRecord>,
    problems: Vec<ZoneProblem>,
    /// `$TTL`; lasts across `$INCLUDE` boundaries like in BIND.
    default_ttl: Option<u32>,
    last_ttl: Option<u32>,
    /// Canonical paths of the files being parsed, to refuse include cycles.
    include_stack: Vec<PathBuf>,
    /// Every file read and what it held (see [`ParsedZone::sources`]).
    sources: Vec<(PathBuf, crate::files::Digest)>,
    gave_up: bool,
    /// What is left of the zone's budget ([`MAX_INCLUDED_FILES`], [`MAX_ZONE_TOTAL_BYTES`]).
    budget: Budget,
}

/// What a zone may still read through `$INCLUDE`.
#[derive(Debug, Clone, Copy)]
struct Budget {
    files: usize,
    bytes: u64,
    /// Exhausted (and said so): later includes are skipped.
    spent: bool,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            files: MAX_INCLUDED_FILES,
            bytes: MAX_ZONE_TOTAL_BYTES,
            spent: false,
        }
    }
}

/// State that belongs to one file: `$ORIGIN` and the previous owner do not leak out of an
/// included file.
struct FileState {
    file: Arc<PathBuf>,
    origin: Name,
    last_owner: Option<Name>,
    depth: usize,
}

impl Parser {
    fn report(&mut self, file: &Path, problem: Fault) {
        if self.gave_up {
            return;
        }
        if self.problems.len() >= MAX_PROBLEMS {
            self.gave_up = true;
            let message = format!("more than {MAX_PROBLEMS} problems; giving up on this zone");
            self.problems.push(ZoneProblem::error(file, 0, message));
            return;
        }
        self.problems
            .push(ZoneProblem::error(file, problem.line, problem.message));
    }

    fn parse_source(&mut self, bytes: &[u8], file: &Arc<PathBuf>, origin: Name, depth: usize) {
        let mut state = FileState {
            file: Arc::clone(file),
            origin,
            last_owner: None,
            depth,
        };
        // Editors on some platforms start files with a UTF-8 byte order mark.
        let bytes = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
        let mut lexer = Lexer::new(bytes);
        while let Some(entry) = lexer.next_entry() {
            if self.gave_up {
                return;
            }
            let outcome = entry.and_then(|entry| self.parse_entry(&entry, &mut state));
            if let Err(problem) = outcome {
                self.report(file, problem);
            }
        }
    }

    fn parse_entry(&mut self, entry: &Entry, state: &mut FileState) -> Result<(), Fault> {
        let Some(first) = entry.tokens.first() else {
            return Ok(());
        };
        if !first.quoted && first.text.starts_with(b"$") {
            return self.directive(entry, state);
        }
        let record = self.record(entry, state)?;
        self.records.push(record);
        Ok(())
    }

    fn directive(&mut self, entry: &Entry, state: &mut FileState) -> Result<(), Fault> {
        let tokens = &entry.tokens;
        let directive = tokens[0].shown().to_ascii_uppercase();
        let argument = |i: usize| {
            tokens
                .get(i)
                .ok_or_else(|| fault(entry.line, format!("{directive} needs an argument")))
        };
        let no_more = |i: usize| match tokens.get(i) {
            Some(extra) => Err(fault(
                extra.line,
                format!("unexpected '{}' after {directive}", extra.shown()),
            )),
            None => Ok(()),
        };
        match directive.as_str() {
            "$ORIGIN" => {
                let origin = parse_name(argument(1)?, &state.origin)?;
                no_more(2)?;
                state.origin = origin;
            }
            "$TTL" => {
                let ttl = parse_ttl(argument(1)?)?;
                no_more(2)?;
                self.default_ttl = Some(ttl);
            }
            "$INCLUDE" => {
                let file_token = argument(1)?;
                let origin = match tokens.get(2) {
                    Some(token) => parse_name(token, &state.origin)?,
                    None => state.origin.clone(),
                };
                no_more(3)?;
                self.include(file_token, origin, state)?;
            }
            _ => {
                return Err(fault(
                    entry.line,
                    format!("unsupported directive {}", tokens[0].shown()),
                ))
            }
        }
        Ok(())
    }

    fn include(
        &mut self,
        file_token: &Token,
        origin: Name,
        state: &FileState,
    ) -> Result<(), Fault> {
        let line = file_token.line;
        let relative = String::from_utf8(unescape(file_token)?)
            .map_err(|_| fault(line, "$INCLUDE file name is not valid UTF-8"))?;
        let base = state.file.parent().unwrap_or_else(|| Path::new(""));
        let path = base.join(&relative);
        if state.depth + 1 > MAX_INCLUDE_DEPTH {
            return Err(fault(
                line,
                format!("$INCLUDE nested deeper than {MAX_INCLUDE_DEPTH} levels"),
            ));
        }
        let canonical = std::fs::canonicalize(&path).map_err(|e| {
            fault(
                line,
                format!("cannot read included file {}: {e}", path.display()),
            )
        })?;
        if self.include_stack.contains(&canonical) {
            return Err(fault(
                line,
                format!("$INCLUDE cycle: {} is already being read", path.display()),
            ));
        }
        if self.budget.spent {
            // Said once; the zone is refused, the includes after it are not even tried.
            return Ok(());
        }
        if self.budget.files == 0 {
            self.budget.spent = true;
            return Err(fault(
                line,
                format!(
                    "$INCLUDE of {}: the zone already read {MAX_INCLUDED_FILES} included files, \
                     the most one zone may (count each time a file is included)",
                    path.display()
                ),
            ));
        }
        self.budget.files -= 1;
        let bytes = crate::files::read_limited(&path, self.budget.bytes).map_err(|e| {
            if e.kind() == std::io::ErrorKind::InvalidData {
                self.budget.spent = true;
                fault(
                    line,
                    format!(
                        "$INCLUDE of {}: the zone and its included files would exceed \
                         {MAX_ZONE_TOTAL_BYTES} bytes in all",
                        path.display()
                    ),
                )
            } else {
                fault(line, format!("included file {}: {e}", path.display()))
            }
        })?;
        self.budget.bytes -= bytes.len() as u64;
        self.include_stack.push(canonical);
        self.sources
            .push((path.clone(), crate::files::digest(&bytes)));
        self.parse_source(&bytes, &Arc::new(path), origin, state.depth + 1);
        self.include_stack.pop();
        Ok(())
    }

    fn record(&mut self, entry: &Entry, state: &mut FileState) -> Result<SourceRecord, Fault> {
        let mut tokens = entry.tokens.as_slice();
        let name = if entry.has_owner {
            let owner = parse_name(&tokens[0], &state.origin)?;
            tokens = &tokens[1..];
            owner
        } else {
            state.last_owner.clone().ok_or_else(|| {
                fault(
                    entry.line,
                    "record has no owner name and there is no previous owner",
                )
            })?
        };
        state.last_owner = Some(name.clone());

        let mut ttl = None;
        let mut class_seen = false;
        let rtype = loop {
            let Some((token, rest)) = tokens.split_first() else {
                return Err(fault(entry.line, "record has no type"));
            };
            tokens = rest;
            if token.text.first().is_some_and(u8::is_ascii_digit) && !token.quoted && ttl.is_none()
            {
                ttl = Some(parse_ttl(token)?);
            } else if let Some(class) = parse_class(token).filter(|_| !class_seen) {
                class?;
                class_seen = true;
            } else {
                break parse_type(token)?;
            }
        };
        if let Some(reason) = refused_type(rtype) {
            return Err(fault(entry.line, reason));
        }
        let ttl = self.record_ttl(ttl, entry.line)?;
        let rdata = rdata_to_wire(rtype, tokens, &state.origin, entry.line)?;
        if rdata.len() > MAX_RDATA_OCTETS {
            return Err(fault(
                entry.line,
                format!("RDATA is {} octets; the limit is 65535", rdata.len()),
            ));
        }
        Ok(SourceRecord {
            name,
            rtype,
            ttl,
            rdata,
            file: Arc::clone(&state.file),
            line: entry.line,
        })
    }

    /// Explicit TTL, else `$TTL`, else the previous record's TTL (RFC 1035 / RFC 2308).
    fn record_ttl(&mut self, explicit: Option<u32>, line: u32) -> Result<u32, Fault> {
        if let Some(ttl) = explicit {
            self.last_ttl = Some(ttl);
            return Ok(ttl);
        }
        self.default_ttl
            .or(self.last_ttl)
            .ok_or_else(|| fault(line, "record has no TTL and no $TTL was set before it"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEAD: &str = "$TTL 3600\n@ IN SOA ns1 hostmaster 1 7200 900 1209600 300\n@ IN NS ns1\n";

    fn origin() -> Name {
        Name::from_ascii("example.com.").expect("test origin")
    }

    fn path() -> PathBuf {
        PathBuf::from("zones/example.com.zone")
    }

    fn records(text: &str) -> Vec<SourceRecord> {
        match parse_zone_text(text, &path(), &origin()) {
            Ok(zone) => zone.records,
            Err(problems) => panic!("unexpected problems: {problems:#?}"),
        }
    }

    fn problems(text: &str) -> Vec<ZoneProblem> {
        match parse_zone_text(text, &path(), &origin()) {
            Ok(zone) => panic!("expected problems, got {:#?}", zone.records),
            Err(problems) => problems,
        }
    }

    /// The single problem of `text`, as "line: message".
    fn only_problem(text: &str) -> (u32, String) {
        let found = problems(text);
        assert_eq!(found.len(), 1, "{found:#?}");
        (found[0].line, found[0].message.clone())
    }

    fn name(text: &str) -> Name {
        Name::from_ascii(text).expect("test name")
    }

    fn wire(name_text: &str) -> Vec<u8> {
        let mut out = Vec::new();
        push_name(&mut out, &name(name_text));
        out
    }

    fn find<'r>(records: &'r [SourceRecord], owner: &str, rtype: RecordType) -> &'r SourceRecord {
        records
            .iter()
            .find(|r| r.name.eq_case(&name(owner)) && r.rtype == rtype)
            .unwrap_or_else(|| panic!("no {owner} {rtype} in {records:#?}"))
    }

    /// A scratch directory under the system temp dir, removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            let dir = std::env::temp_dir()
                .join(format!("steerdns-zoneparse-{}-{tag}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("create temp dir");
            Self(dir)
        }

        fn write(&self, file: &str, text: &str) -> PathBuf {
            let path = self.0.join(file);
            std::fs::write(&path, text).expect("write temp file");
            path
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn at_sign_relative_and_absolute_names() {
        let recs = records(&format!(
            "{HEAD}www IN CNAME edge.example.net.\nftp IN CNAME www\n"
        ));
        let soa = find(&recs, "example.com.", RecordType::SOA);
        assert!(soa.rdata.starts_with(&wire("ns1.example.com.")));
        assert_eq!(
            find(&recs, "www.example.com.", RecordType::CNAME).rdata,
            wire("edge.example.net.")
        );
        assert_eq!(
            find(&recs, "ftp.example.com.", RecordType::CNAME).rdata,
            wire("www.example.com.")
        );
    }

    #[test]
    fn soa_fields_are_encoded_in_order() {
        let recs = records("@ 60 IN SOA ns1 host.master 2026113001 2h 15m 2w 300\n");
        let mut expected = wire("ns1.example.com.");
        expected.extend(wire("host.master.example.com."));
        for value in [2_026_113_001u32, 7200, 900, 1_209_600, 300] {
            expected.extend(value.to_be_bytes());
        }
        assert_eq!(recs[0].rdata, expected);
    }

    #[test]
    fn origin_directive_changes_relative_names() {
        let text = format!(
            "{HEAD}$ORIGIN sub\nwww IN A 192.0.2.1\n$ORIGIN other.test.\n@ IN A 192.0.2.2\n"
        );
        let recs = records(&text);
        assert_eq!(
            find(&recs, "www.sub.example.com.", RecordType::A).rdata,
            vec![192, 0, 2, 1]
        );
        assert_eq!(
            find(&recs, "other.test.", RecordType::A).rdata,
            vec![192, 0, 2, 2]
        );
    }

    #[test]
    fn ttl_directive_with_units() {
        for (ttl, seconds) in [
            ("1h", 3600),
            ("1h30m", 5400),
            ("2D", 172_800),
            ("1w", 604_800),
            ("90", 90),
            ("1m30", 90),
        ] {
            let recs = records(&format!("$TTL {ttl}\n@ IN A 192.0.2.1\n"));
            assert_eq!(recs[0].ttl, seconds, "$TTL {ttl}");
        }
    }

    #[test]
    fn omitted_owner_is_the_previous_owner() {
        let recs = records(&format!(
            "{HEAD}www IN A 192.0.2.1\n    IN AAAA 2001:db8::1\n\tIN TXT hi\n"
        ));
        assert_eq!(recs.len(), 5);
        for record in &recs[2..] {
            assert!(record.name.eq_case(&name("www.example.com.")), "{record:?}");
        }
    }

    #[test]
    fn omitted_ttl_uses_dollar_ttl_then_last_explicit_ttl() {
        let recs =
            records("@ 300 IN A 192.0.2.1\nwww IN A 192.0.2.2\n$TTL 60\nftp IN A 192.0.2.3\n");
        let ttls: Vec<u32> = recs.iter().map(|r| r.ttl).collect();
        assert_eq!(ttls, vec![300, 300, 60]);
        let (line, message) = only_problem("\n@ IN A 192.0.2.1\n");
        assert_eq!(line, 2);
        assert!(message.contains("no TTL"), "{message}");
    }

    #[test]
    fn ttl_and_class_in_either_order_and_class1() {
        let recs = records("a 60 IN A 192.0.2.1\nb IN 61 A 192.0.2.2\nc CLASS1 62 A 192.0.2.3\nd in 63 a 192.0.2.4\n");
        let ttls: Vec<u32> = recs.iter().map(|r| r.ttl).collect();
        assert_eq!(ttls, vec![60, 61, 62, 63]);
        assert!(recs.iter().all(|r| r.rtype == RecordType::A));
    }

    #[test]
    fn classes_other_than_in_are_refused() {
        for class in ["CH", "HS", "CLASS3", "ANY"] {
            let (line, message) = only_problem(&format!("$TTL 60\n\nv {class} TXT x\n"));
            assert_eq!(line, 3);
            assert!(
                message.contains(&format!("class {class} is not supported")),
                "{message}"
            );
        }
    }

    #[test]
    fn parentheses_span_lines_and_line_numbers_stay_right() {
        let text = "$TTL 60\n@ IN SOA ns1 hostmaster ( ; comment\n  1 ; serial\n  2 3 4\n  5 )\nwww IN A 192.0.2.1\n";
        let recs = records(text);
        assert_eq!(recs[0].line, 2);
        assert_eq!(
            recs[0].rdata.len(),
            wire("ns1.example.com.").len() + wire("hostmaster.example.com.").len() + 20
        );
        assert_eq!(recs[1].line, 6);
    }

    #[test]
    fn quoted_strings_with_escapes() {
        let recs =
            records("$TTL 60\n@ IN TXT \"a \\\"b\\\" ; not a comment\" \\065x \"\\255\" \"\"\n");
        let mut expected = vec![21];
        expected.extend(b"a \"b\" ; not a comment");
        expected.extend([2, b'A', b'x', 1, 255, 0]);
        assert_eq!(recs[0].rdata, expected);
    }

    #[test]
    fn escaped_dots_and_digits_in_names() {
        let recs = records("$TTL 60\na\\.b IN A 192.0.2.1\n\\065bc.example.com. IN A 192.0.2.2\n");
        let first: Vec<&[u8]> = recs[0].name.iter().collect();
        assert_eq!(first, vec![&b"a.b"[..], b"example", b"com"]);
        assert_eq!(recs[1].name.iter().next(), Some(&b"Abc"[..]));
    }

    #[test]
    fn letter_case_is_kept_in_owner_and_rdata() {
        let recs = records("$TTL 60\nWWW.Example.COM. IN CNAME Edge.Example.NET.\n");
        assert_eq!(recs[0].name.to_ascii(), "WWW.Example.COM.");
        assert_eq!(recs[0].rdata, wire("Edge.Example.NET."));
        assert_eq!(recs[0].rdata[1], b'E');
    }

    #[test]
    fn comments_blank_lines_and_crlf() {
        let text = "; header\r\n$TTL 60\r\n\r\n   \r\n; comment\r\nwww IN A 192.0.2.1 ; trailing\r\nftp IN TXT \"x\"\r\n";
        let recs = records(&format!("\u{feff}{text}"));
        assert_eq!(recs.iter().map(|r| r.line).collect::<Vec<_>>(), vec![6, 7]);
        assert_eq!(recs[1].rdata, vec![1, b'x']);
    }

    #[test]
    fn name_bearing_types_are_encoded() {
        let text = "$TTL 60\n@ IN MX 10 mail\n_sip._tcp IN SRV 1 2 5060 sip\nptr IN PTR host.example.net.\nn IN NAPTR 100 10 \"S\" \"SIP+D2U\" \"\" _sip._udp\n";
        let recs = records(text);
        let mut mx = 10u16.to_be_bytes().to_vec();
        mx.extend(wire("mail.example.com."));
        assert_eq!(find(&recs, "example.com.", RecordType::MX).rdata, mx);
        let mut srv = [1u16, 2, 5060]
            .iter()
            .flat_map(|v| v.to_be_bytes())
            .collect::<Vec<u8>>();
        srv.extend(wire("sip.example.com."));
        assert_eq!(
            find(&recs, "_sip._tcp.example.com.", RecordType::SRV).rdata,
            srv
        );
        assert_eq!(
            find(&recs, "ptr.example.com.", RecordType::PTR).rdata,
            wire("host.example.net.")
        );
        let mut naptr = vec![0, 100, 0, 10, 1, b'S', 7];
        naptr.extend(b"SIP+D2U");
        naptr.push(0);
        naptr.extend(wire("_sip._udp.example.com."));
        assert_eq!(
            find(&recs, "n.example.com.", RecordType::NAPTR).rdata,
            naptr
        );
    }

    #[test]
    fn ds_caa_and_hickory_types() {
        let text = "$TTL 60\n\
            sub IN DS 60485 5 1 ( 2BB183AF5F22588179A5\n 3B0A98631FAD1A292118 )\n\
            @ IN CAA 0 issue \"ca.example.net\"\n\
            @ IN AAAA 2001:db8::1\n\
            @ IN SSHFP 1 1 123456789abcdef67890123456789abcdef67890\n\
            _443._tcp IN TLSA 3 1 1 0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF0123456789ABCDEF\n\
            @ IN HINFO \"PC\" \"Linux\"\n";
        let recs = records(text);
        let ds = find(&recs, "sub.example.com.", RecordType::DS);
        assert_eq!(&ds.rdata[..4], &[0xec, 0x45, 5, 1]);
        assert_eq!(ds.rdata.len(), 4 + 20);
        assert_eq!(ds.line, 2);
        let mut caa = vec![0, 5];
        caa.extend(b"issueca.example.net");
        assert_eq!(find(&recs, "example.com.", RecordType::CAA).rdata, caa);
        assert_eq!(
            find(&recs, "example.com.", RecordType::AAAA).rdata.len(),
            16
        );
        assert_eq!(
            find(&recs, "example.com.", RecordType::SSHFP).rdata[..2],
            [1, 1]
        );
        assert_eq!(
            find(&recs, "_443._tcp.example.com.", RecordType::TLSA)
                .rdata
                .len(),
            3 + 32
        );
        assert_eq!(
            find(&recs, "example.com.", RecordType::HINFO).rdata,
            b"\x02PC\x05Linux".to_vec()
        );
    }

    #[test]
    fn https_target_is_completed_with_the_origin() {
        let recs = records(
            "$TTL 60\n@ IN HTTPS 1 edge alpn=\"h2,h3\" port=443\nw IN SVCB 0 svc.example.net.\n",
        );
        let https = find(&recs, "example.com.", RecordType::HTTPS);
        let target = wire("edge.example.com.");
        assert_eq!(&https.rdata[..2], &[0, 1]);
        assert_eq!(&https.rdata[2..2 + target.len()], target.as_slice());
        let alpn = [0, 1, 0, 6, 2, b'h', b'2', 2, b'h', b'3'];
        assert!(
            https.rdata.windows(alpn.len()).any(|w| w == alpn),
            "{:?}",
            https.rdata
        );
        let svcb = find(&recs, "w.example.com.", RecordType::SVCB);
        assert_eq!(&svcb.rdata[2..], wire("svc.example.net.").as_slice());
    }

    #[test]
    fn rfc3597_generic_syntax() {
        let recs = records("$TTL 60\n@ CLASS1 TYPE65280 \\# 4 0a000001\n@ IN A \\# 4 C0000201\n@ IN TYPE1 192.0.2.9\ne IN TYPE65281 \\# 0\n");
        assert_eq!(recs[0].rtype, RecordType::Unknown(65280));
        assert_eq!(recs[0].rdata, vec![10, 0, 0, 1]);
        assert_eq!(recs[1].rdata, vec![192, 0, 2, 1]);
        assert_eq!(recs[2].rtype, RecordType::A);
        assert_eq!(recs[2].rdata, vec![192, 0, 2, 9]);
        assert!(recs[3].rdata.is_empty());
        let (_, message) = only_problem("$TTL 60\n@ IN TYPE65280 \\# 5 0a000001\n");
        assert!(message.contains("says 5 octets but has 4"), "{message}");
        let (_, message) = only_problem("$TTL 60\n@ IN A \\# 3 0a0000\n");
        assert!(message.contains("not valid A data"), "{message}");
        let (_, message) = only_problem("$TTL 60\n@ IN CNAME \\# 2 0341\n");
        assert!(message.contains("not valid CNAME data"), "{message}");
        let cname = records("$TTL 60\n@ IN CNAME \\# 3 014100\n");
        assert_eq!(cname[0].rdata, vec![1, b'A', 0]);
    }

    #[test]
    fn include_is_relative_to_the_including_file_and_restores_origin() {
        let dir = TempDir::new("include");
        std::fs::create_dir_all(dir.0.join("parts")).expect("mkdir");
        dir.write(
            "parts/hosts.inc",
            "; hosts\nwww IN A 192.0.2.1\n$ORIGIN deep\nx IN A 192.0.2.2\n",
        );
        let main = dir.write("example.com.zone", "$TTL 60\n$INCLUDE parts/hosts.inc sub\nafter IN A 192.0.2.3\n$INCLUDE \"parts/hosts.inc\"\n");
        let zone = match load_zone_file(&main, &origin()) {
            Ok(zone) => zone,
            Err(problems) => panic!("{problems:#?}"),
        };
        let included = dir.0.join("parts/hosts.inc");
        let www = find(&zone.records, "www.sub.example.com.", RecordType::A);
        assert_eq!((www.file.as_path(), www.line), (included.as_path(), 2));
        assert_eq!(
            find(&zone.records, "x.deep.sub.example.com.", RecordType::A).line,
            4
        );
        let after = find(&zone.records, "after.example.com.", RecordType::A);
        assert_eq!((after.file.as_path(), after.line), (main.as_path(), 3));
        find(&zone.records, "www.example.com.", RecordType::A);
    }

    #[test]
    fn include_cycles_depth_and_missing_files_are_problems() {
        let dir = TempDir::new("cycle");
        dir.write("b.inc", "\n$INCLUDE a.zone\n");
        let a = dir.write("a.zone", "$TTL 60\n$INCLUDE b.inc\n$INCLUDE missing.inc\n");
        let Err(found) = load_zone_file(&a, &origin()) else {
            panic!("cycle accepted")
        };
        assert_eq!(found.len(), 2, "{found:#?}");
        assert_eq!(
            (found[0].file.clone(), found[0].line),
            (dir.0.join("b.inc"), 2)
        );
        assert!(found[0].message.contains("cycle"), "{}", found[0].message);
        assert_eq!((found[1].file.clone(), found[1].line), (a.clone(), 3));
        assert!(
            found[1].message.contains("missing.inc"),
            "{}",
            found[1].message
        );

        for i in 0..=MAX_INCLUDE_DEPTH + 1 {
            dir.write(&format!("d{i}.inc"), &format!("$INCLUDE d{}.inc\n", i + 1));
        }
        let deep = dir.write("deep.zone", "$INCLUDE d0.inc\n");
        let Err(found) = load_zone_file(&deep, &origin()) else {
            panic!("depth accepted")
        };
        assert!(
            found.iter().any(|p| p.message.contains("nested deeper")),
            "{found:#?}"
        );
    }

    /// Depth alone bounds nothing: six includes per level, five levels deep, is 7776 reads.
    /// The zone's budget of included files and of bytes stops it, said once at the include
    /// that crossed it.
    #[test]
    fn include_fan_out_is_bounded_by_files_and_bytes() {
        let dir = TempDir::new("fanout");
        for level in 1..=5 {
            let next = if level == 5 {
                "x IN TXT \"leaf\"\n".to_string()
            } else {
                format!("$INCLUDE l{}.inc\n", level + 1).repeat(6)
            };
            dir.write(&format!("l{level}.inc"), &next);
        }
        let zone = dir.write(
            "fan.zone",
            &format!("$TTL 60\n{}", "$INCLUDE l1.inc\n".repeat(6)),
        );
        let Err(found) = load_zone_file(&zone, &origin()) else {
            panic!("fan-out accepted")
        };
        assert_eq!(found.len(), 1, "{found:#?}");
        assert!(
            found[0]
                .message
                .contains("already read 1024 included files"),
            "{}",
            found[0].message
        );
        assert!(found[0].line > 0, "{found:#?}");

        // Bytes: a small budget is crossed by the third include of a 40-byte file.
        dir.write("forty.inc", &format!("a IN TXT \"{}\"\n", "x".repeat(28)));
        let text = "$TTL 60\n$INCLUDE forty.inc\n$INCLUDE forty.inc\n$INCLUDE forty.inc\n";
        let zone = dir.write("bytes.zone", text);
        let budget = Budget {
            files: 10,
            bytes: text.len() as u64 + 100,
            spent: false,
        };
        let Err(found) = parse_zone_bytes_within(text.as_bytes(), &zone, &origin(), budget) else {
            panic!("byte budget ignored")
        };
        assert_eq!(found.len(), 1, "{found:#?}");
        assert_eq!(
            (found[0].file.as_path(), found[0].line),
            (zone.as_path(), 4)
        );
        assert!(
            found[0].message.contains("would exceed"),
            "{}",
            found[0].message
        );
        let ok = Budget {
            bytes: text.len() as u64 + 120,
            ..budget
        };
        assert!(parse_zone_bytes_within(text.as_bytes(), &zone, &origin(), ok).is_ok());
    }

    #[test]
    fn size_limits() {
        let long_label = "a".repeat(64);
        let (_, message) = only_problem(&format!("$TTL 60\n{long_label} IN A 192.0.2.1\n"));
        assert!(message.contains("longer than 63"), "{message}");
        let ok_label = "a".repeat(63);
        records(&format!("$TTL 60\n{ok_label} IN A 192.0.2.1\n"));

        let long_name = vec!["abcdefghi"; 26].join(".");
        let (_, message) = only_problem(&format!("$TTL 60\n{long_name}. IN A 192.0.2.1\n"));
        assert!(
            message.contains("octets long; the limit is 255"),
            "{message}"
        );

        assert_eq!(
            records("$TTL 2147483647\n@ IN A 192.0.2.1\n")[0].ttl,
            MAX_TTL
        );
        let found = problems("$TTL 2147483648\n@ IN A 192.0.2.1\n");
        assert_eq!(found[0].line, 1);
        assert!(found[0].message.contains("above the limit"), "{found:#?}");

        let string = format!("\"{}\" ", "x".repeat(255));
        records(&format!("$TTL 60\n@ IN TXT {}\n", string.repeat(255)));
        let (_, message) = only_problem(&format!("$TTL 60\n@ IN TXT {}\n", string.repeat(257)));
        assert!(message.contains("the limit is 65535"), "{message}");
        let (_, message) = only_problem(&format!("$TTL 60\n@ IN TXT \"{}\"\n", "x".repeat(256)));
        assert!(
            message.contains("character string is 256 octets"),
            "{message}"
        );
    }

    #[test]
    fn problems_are_collected_with_lines() {
        let text = "$TTL 60\n@ IN A 1.2.3\nok IN A 192.0.2.1\n@ IN FOO x\n$GENERATE 1-2 a A 1.2.3.4\n@ IN DNAME x\n";
        let found = problems(text);
        let lines: Vec<u32> = found.iter().map(|p| p.line).collect();
        assert_eq!(lines, vec![2, 4, 5, 6], "{found:#?}");
        assert!(found[1].message.contains("unknown record type 'FOO'"));
        assert!(found[2].message.contains("unsupported directive $GENERATE"));
        assert!(found[3].message.contains("DNAME"));
        assert!(found.iter().all(|p| p.file == path() && p.is_error()));
    }

    #[test]
    fn hostile_syntax_is_reported_not_panicked() {
        let cases: [(&str, u32, &str); 10] = [
            (
                "$TTL 60\n@ IN TXT \"open\n@ IN A 192.0.2.1\n",
                2,
                "unterminated quoted string",
            ),
            (
                "$TTL 60\n@ IN SOA ( a b\n1 2 3 4 5\n",
                2,
                "'(' is never closed",
            ),
            ("$TTL 60\n@ IN A 192.0.2.1 )\n", 2, "')' without"),
            (
                "$TTL 60\n@ IN MX 99999999999999999999999 mx\n",
                2,
                "preference",
            ),
            (
                "$TTL 60\n@ IN 99999999999999999999 A 192.0.2.1\n",
                2,
                "above the limit",
            ),
            (
                "$TTL 60\n@ 99999999999999999999s IN A 192.0.2.1\n",
                2,
                "above the limit",
            ),
            ("$TTL 60\nx\\1 IN A 192.0.2.1\n", 2, "three decimal digits"),
            ("$TTL 60\n@ IN TXT x\\\n", 2, "backslash"),
            (
                "$TTL 60\n\u{1}\u{2} IN A 192.0.2.1\n",
                2,
                "control character 0x01",
            ),
            ("$TTL 60\nwww.bücher IN A 192.0.2.1\n", 2, "punycode"),
        ];
        for (text, line, needle) in cases {
            let found = problems(text);
            assert!(
                found
                    .iter()
                    .any(|p| p.line == line && p.message.contains(needle)),
                "{text:?}: expected line {line} '{needle}', got {found:#?}"
            );
        }
    }

    #[test]
    fn binary_garbage_never_panics_and_problems_are_capped() {
        // A fixed-seed xorshift keeps the test deterministic.
        let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabet = b"$@()\";\\.\n\r\t 0123456789aAzZ:-_#INTXTSOA\x00\xff\x80";
        for round in 0..400 {
            let len = (next() % 200) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    if round % 2 == 0 {
                        alphabet[(next() % alphabet.len() as u64) as usize]
                    } else {
                        next() as u8
                    }
                })
                .collect();
            let _ = parse_zone_bytes(&bytes, &path(), &origin());
        }
        let many = "@ IN A nonsense\n".repeat(500);
        let found = problems(&many);
        assert_eq!(found.len(), MAX_PROBLEMS + 1);
        assert!(found[MAX_PROBLEMS].message.contains("giving up"));
    }

    #[test]
    fn hickory_type_errors_are_problems() {
        for text in [
            "@ IN SSHFP x y z",
            "@ IN TLSA 3 1",
            "@ IN HTTPS 1 . alpn=",
            "@ IN HTTPS",
            "@ IN CAA 0 bad-tag x",
        ] {
            let found = problems(&format!("$TTL 60\n{text}\n"));
            assert_eq!(found[0].line, 2, "{text}: {found:#?}");
        }
    }

    #[test]
    fn problem_display_names_file_line_and_severity() {
        let error = ZoneProblem::error(
            "zones/example.com.zone",
            12,
            "CNAME beside other data at www.example.com.",
        );
        assert_eq!(
            error.to_string(),
            "zones/example.com.zone:12: error: CNAME beside other data at www.example.com."
        );
        let warning = ZoneProblem::warning("zones/example.com.zone", 0, "no NS records");
        assert_eq!(
            warning.to_string(),
            "zones/example.com.zone: warning: no NS records"
        );
    }

    #[test]
    fn origin_from_file_names() {
        assert_eq!(
            origin_from_file_name(Path::new("zones/example.com.zone")),
            Some(name("example.com."))
        );
        assert_eq!(
            origin_from_file_name(Path::new("2.0.192.in-addr.arpa.zone")),
            Some(name("2.0.192.in-addr.arpa."))
        );
        assert_eq!(
            origin_from_file_name(Path::new("zones/example.com.txt")),
            None
        );
        assert_eq!(origin_from_file_name(Path::new("zones/.zone")), None);
        assert_eq!(origin_from_file_name(Path::new("zones/a..b.zone")), None);
    }

    #[test]
    fn zone_dir_loading() {
        let dir = TempDir::new("dir");
        dir.write("b.example.zone", "$TTL 60\n@ IN A 192.0.2.1\n");
        dir.write("a.example.zone", "$TTL 60\n@ IN A 192.0.2.2\n");
        dir.write("a.example..zone", "$TTL 60\n@ IN A 192.0.2.3\n");
        // A duplicate of a file that fails to parse is still a duplicate.
        dir.write("d.example..zone", "@ IN A 192.0.2.4\n");
        dir.write("d.example.zone", "$TTL 60\n@ IN A 192.0.2.5\n");
        let broken = dir.write("c.example.zone", "$TTL 60\n\n@ IN A nope\n");
        dir.write("notes.txt", "not a zone");
        let (zones, found) = load_zone_dir(&dir.0);
        let origins: Vec<String> = zones.iter().map(|z| z.origin.to_ascii()).collect();
        assert_eq!(origins, vec!["a.example.", "b.example."]);
        assert_eq!(found.len(), 4, "{found:#?}");
        assert!(found[2].message.contains("no TTL"), "{}", found[2]);
        let duplicate = &found[3];
        assert!(
            duplicate
                .message
                .contains("zone d.example. is also loaded from"),
            "{duplicate}"
        );
        assert!(
            found[0].message.contains("also loaded from"),
            "{}",
            found[0]
        );
        assert_eq!((found[1].file.clone(), found[1].line), (broken, 3));

        let (zones, found) = load_zone_dir(&dir.0.join("missing"));
        assert!(zones.is_empty());
        assert!(
            found[0].message.contains("cannot read zone directory"),
            "{}",
            found[0]
        );
    }
}
