//! The parser: entries → records, directives (`$ORIGIN`, `$TTL`, `$INCLUDE`) and problems.
//! Owns the state that carries from entry to entry (the previous owner and TTL, the origin),
//! the include stack and budget, and when to give up on a zone.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hickory_proto::rr::Name;

use super::fields::{parse_class, parse_name, parse_ttl, parse_type, refused_type, unescape};
use super::lexer::{fault, Entry, Fault, Lexer, Token};
use super::rdata::rdata_to_wire;
use super::{
    ParsedZone, SourceRecord, ZoneProblem, MAX_INCLUDED_FILES, MAX_INCLUDE_DEPTH, MAX_PROBLEMS,
    MAX_RDATA_OCTETS, MAX_ZONE_TOTAL_BYTES,
};

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
pub(super) struct Budget {
    pub(super) files: usize,
    pub(super) bytes: u64,
    /// Exhausted (and said so): later includes are skipped.
    pub(super) spent: bool,
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

pub(super) fn parse_zone_bytes_within(
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
        text: None,
    })
}
