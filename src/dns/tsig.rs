//! TSIG (RFC 8945): signing and verifying DNS messages with a shared secret, HMAC-SHA256 and
//! HMAC-SHA512 (`ring::hmac`), and the key files that hold those secrets.
//!
//! Owns the TSIG record (finding it as the last additional record, removing it for the
//! digest, appending a signed one), the digest rules for a request, its answer and the
//! later messages of a multi-message answer (an AXFR stream, RFC 8945 5.3.1), the time check
//! with fudge and the errors a server answers with (BADSIG, BADKEY, BADTIME). Works on raw
//! message bytes; pure (no I/O but [`read_key_file`], no clock: callers pass the time).
//!
//! Key files use the BIND/Knot `key` statement that `tsig-keygen` and `keymgr -t` print:
//! `key "name" { algorithm hmac-sha256; secret "base64"; };`, any number per file, and like
//! the DNSSEC keys a file group or world may read is refused.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use ring::hmac;

use super::wire::HEADER_LEN;

/// The TSIG record type.
pub const TSIG: u16 = 250;
/// The rcode of an answer whose TSIG failed (the TSIG error field says why).
pub const NOTAUTH: u16 = 9;
/// The fudge this server signs with and accepts at most (RFC 8945 recommends 300 s).
pub const FUDGE: u16 = 300;
/// The largest key file read (a handful of keys).
const KEY_FILE_LIMIT: u64 = 64 * 1024;

/// The TSIG error field (RFC 8945 section 3 and 5.2).
pub mod error {
    pub const NOERROR: u16 = 0;
    pub const BADSIG: u16 = 16;
    pub const BADKEY: u16 = 17;
    pub const BADTIME: u16 = 18;
    pub const BADTRUNC: u16 = 22;
}

/// A TSIG algorithm this server implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algorithm {
    HmacSha256,
    HmacSha512,
}

impl Algorithm {
    /// The name used in key files and `dig -y` (`hmac-sha256`).
    pub fn from_name(name: &str) -> Option<Algorithm> {
        match name.trim_end_matches('.').to_ascii_lowercase().as_str() {
            "hmac-sha256" => Some(Algorithm::HmacSha256),
            "hmac-sha512" => Some(Algorithm::HmacSha512),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::HmacSha256 => "hmac-sha256",
            Algorithm::HmacSha512 => "hmac-sha512",
        }
    }

    /// The algorithm's domain name in wire format (it goes into the TSIG record).
    fn wire_name(self) -> &'static [u8] {
        match self {
            Algorithm::HmacSha256 => b"\x0bhmac-sha256\x00",
            Algorithm::HmacSha512 => b"\x0bhmac-sha512\x00",
        }
    }

    fn ring(self) -> hmac::Algorithm {
        match self {
            Algorithm::HmacSha256 => hmac::HMAC_SHA256,
            Algorithm::HmacSha512 => hmac::HMAC_SHA512,
        }
    }

    fn mac_len(self) -> usize {
        match self {
            Algorithm::HmacSha256 => 32,
            Algorithm::HmacSha512 => 64,
        }
    }
}

/// A shared secret with its name.
#[derive(Clone)]
pub struct Key {
    /// The key name as written in the key file (`transfer-key`), without a final dot.
    pub name: String,
    /// The same name, lower-cased, in wire format (it goes into the TSIG record).
    wire_name: Vec<u8>,
    pub algorithm: Algorithm,
    key: hmac::Key,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({}, {})", self.name, self.algorithm.as_str())
    }
}

impl Key {
    /// A key from its name, algorithm and secret bytes; `None` for a name that is not a
    /// valid domain name.
    pub fn new(name: &str, algorithm: Algorithm, secret: &[u8]) -> Option<Key> {
        let name = name.trim_end_matches('.');
        Some(Key {
            name: name.to_string(),
            wire_name: text_to_wire(name)?,
            algorithm,
            key: hmac::Key::new(algorithm.ring(), secret),
        })
    }

    /// Whether `wire` (a lower-cased wire name) names this key.
    fn is_named(&self, wire: &[u8]) -> bool {
        self.wire_name == wire
    }
}

/// A lower-cased wire name from presentation text (no escapes: key names are plain).
fn text_to_wire(name: &str) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(name.len() + 2);
    for label in name.split('.').filter(|l| !l.is_empty()) {
        if label.len() > 63 {
            return None;
        }
        out.push(label.len() as u8);
        out.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
    }
    out.push(0);
    (out.len() <= 255).then_some(out)
}

/// Why a key file was not read.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("cannot read TSIG key file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("TSIG key file {path} has mode {mode:o}: group or others may read it (chmod 600 it)")]
    Permissions { path: PathBuf, mode: u32 },
    #[error("TSIG key file {path} is larger than {KEY_FILE_LIMIT} bytes")]
    TooLarge { path: PathBuf },
    #[error("TSIG key file {path} line {line}: {message}")]
    Bad {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// Reads every key of a key file (mode 0600 or stricter).
pub fn read_key_file(path: &Path) -> Result<Vec<Key>, KeyFileError> {
    let read = |source| KeyFileError::Read {
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(read)?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyFileError::Permissions {
            path: path.to_path_buf(),
            mode,
        });
    }
    if meta.len() > KEY_FILE_LIMIT {
        return Err(KeyFileError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(path).map_err(read)?;
    parse_keys(&text).map_err(|(line, message)| KeyFileError::Bad {
        path: path.to_path_buf(),
        line,
        message,
    })
}

/// One token of a key file with the line it is on.
#[derive(Debug, PartialEq)]
enum Token<'t> {
    Word(&'t str),
    Quoted(&'t str),
    Open,
    Close,
    End,
}

/// Splits key-file text into tokens; comments are `#`, `//` to the end of the line and
/// `/* ... */`.
fn tokenize(text: &str) -> Result<Vec<(usize, Token<'_>)>, (usize, String)> {
    let mut tokens = Vec::new();
    let mut line = 1;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let skip_to = |s: &str, pat: &str| s.find(pat).map(|i| i + pat.len()).unwrap_or(s.len());
        let taken = match c {
            '\n' => {
                line += 1;
                1
            }
            c if c.is_whitespace() => c.len_utf8(),
            '#' => skip_to(rest, "\n").saturating_sub(1).max(1),
            '/' if rest.starts_with("//") => skip_to(rest, "\n").saturating_sub(1).max(2),
            '/' if rest.starts_with("/*") => {
                let end = rest[2..]
                    .find("*/")
                    .ok_or((line, "comment /* not closed".to_string()))?
                    + 4;
                line += rest[..end].matches('\n').count();
                end
            }
            '{' | '}' | ';' => {
                let token = match c {
                    '{' => Token::Open,
                    '}' => Token::Close,
                    _ => Token::End,
                };
                tokens.push((line, token));
                1
            }
            '"' => {
                let end = rest[1..]
                    .find(['"', '\n'])
                    .filter(|&i| rest.as_bytes()[1 + i] == b'"')
                    .ok_or((line, "string not closed on its line".to_string()))?;
                tokens.push((line, Token::Quoted(&rest[1..1 + end])));
                end + 2
            }
            _ => {
                let end = rest
                    .find(|ch: char| ch.is_whitespace() || "{};\"#".contains(ch))
                    .unwrap_or(rest.len());
                tokens.push((line, Token::Word(&rest[..end])));
                end
            }
        };
        rest = &rest[taken..];
    }
    Ok(tokens)
}

/// Parses `key "name" { algorithm A; secret "S"; };` statements.
fn parse_keys(text: &str) -> Result<Vec<Key>, (usize, String)> {
    let tokens = tokenize(text)?;
    let mut keys = Vec::new();
    let mut at = 0;
    while at < tokens.len() {
        let (key, next) = parse_key_statement(&tokens, at)?;
        if keys.iter().any(|k: &Key| k.wire_name == key.wire_name) {
            return Err((tokens[at].0, format!("key {} defined twice", key.name)));
        }
        keys.push(key);
        at = next;
    }
    if keys.is_empty() {
        return Err((1, "no key statement (key \"name\" { ... };)".to_string()));
    }
    Ok(keys)
}

fn parse_key_statement(
    tokens: &[(usize, Token<'_>)],
    start: usize,
) -> Result<(Key, usize), (usize, String)> {
    let last_line = tokens.last().map(|t| t.0).unwrap_or(1);
    let get = |i: usize| tokens.get(i).map(|(l, t)| (*l, t));
    let expect = |i: usize, want: Token<'_>, what: &str| match get(i) {
        Some((_, t)) if *t == want => Ok(()),
        Some((l, t)) => Err((l, format!("expected {what}, found {t:?}"))),
        None => Err((last_line, format!("expected {what} at the end of the file"))),
    };
    let line = tokens[start].0;
    if tokens[start].1 != Token::Word("key") {
        return Err((line, format!("expected `key`, found {:?}", tokens[start].1)));
    }
    let name = match get(start + 1) {
        Some((_, Token::Word(n) | Token::Quoted(n))) => *n,
        _ => return Err((line, "expected the key's name after `key`".to_string())),
    };
    expect(start + 2, Token::Open, "{")?;
    let (mut algorithm, mut secret) = (None, None);
    let mut i = start + 3;
    loop {
        match get(i) {
            Some((_, Token::Close)) => break,
            Some((l, Token::Word(field))) => {
                let value = match get(i + 1) {
                    Some((_, Token::Word(v) | Token::Quoted(v))) => *v,
                    _ => return Err((l, format!("{field}: value missing"))),
                };
                match *field {
                    "algorithm" => {
                        algorithm = Some(Algorithm::from_name(value).ok_or((
                            l,
                            format!(
                                "algorithm {value} is not supported (hmac-sha256, hmac-sha512)"
                            ),
                        ))?)
                    }
                    "secret" => {
                        secret = Some(
                            data_encoding::BASE64
                                .decode(value.as_bytes())
                                .map_err(|e| (l, format!("secret is not valid base64: {e}")))?,
                        )
                    }
                    other => return Err((l, format!("unknown field {other}"))),
                }
                expect(i + 2, Token::End, ";")?;
                i += 3;
            }
            Some((l, t)) => return Err((l, format!("expected a field or }}, found {t:?}"))),
            None => return Err((last_line, "key statement not closed".to_string())),
        }
    }
    expect(i + 1, Token::End, "; after }")?;
    let algorithm = algorithm.ok_or((line, format!("key {name}: algorithm missing")))?;
    let secret = secret.ok_or((line, format!("key {name}: secret missing")))?;
    if secret.len() < 16 {
        return Err((line, format!("key {name}: secret shorter than 16 bytes")));
    }
    let key = Key::new(name, algorithm, &secret)
        .ok_or((line, format!("key {name}: not a valid domain name")))?;
    Ok((key, i + 2))
}

/// A TSIG record found at the end of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TsigRecord {
    /// Where the TSIG record starts: the message before it is what is digested.
    pub start: usize,
    /// The key name, lower-cased, wire format.
    pub key_name: Vec<u8>,
    /// The algorithm name, lower-cased, wire format.
    pub algorithm_name: Vec<u8>,
    pub time_signed: u64,
    pub fudge: u16,
    pub mac: Vec<u8>,
    pub original_id: u16,
    pub error: u16,
    pub other: Vec<u8>,
}

fn u16_at(msg: &[u8], pos: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*msg.get(pos)?, *msg.get(pos + 1)?]))
}

/// The offset just past a (possibly compressed) name at `pos`.
fn skip_name(msg: &[u8], mut pos: usize) -> Option<usize> {
    loop {
        let len = *msg.get(pos)?;
        match len {
            0 => return Some(pos + 1),
            l if l & 0xC0 == 0xC0 => return Some(pos + 2),
            l if l < 64 => pos += 1 + usize::from(l),
            _ => return None,
        }
    }
}

/// An uncompressed name at `pos`, lower-cased, and the offset past it (TSIG names are never
/// compressed, RFC 8945 4.2).
fn read_plain_name(msg: &[u8], pos: usize) -> Option<(Vec<u8>, usize)> {
    let end = skip_name(msg, pos)?;
    let name = msg.get(pos..end)?;
    if name.last() != Some(&0) || end - pos > 255 {
        return None;
    }
    let mut wire = name.to_vec();
    wire.make_ascii_lowercase();
    // Length bytes are below 64, so lower-casing leaves them alone; a pointer was refused above.
    Some((wire, end))
}

/// The TSIG record of `msg`, if its last additional record is one. `Err` when the message
/// is malformed or a TSIG record is anywhere but last (RFC 8945 5.1: FORMERR).
pub fn find(msg: &[u8]) -> Result<Option<TsigRecord>, Malformed> {
    let count = |i: usize| u16_at(msg, 4 + 2 * i).map(usize::from).ok_or(Malformed);
    let (qd, an, ns, ar) = (count(0)?, count(1)?, count(2)?, count(3)?);
    let mut pos = HEADER_LEN;
    for _ in 0..qd {
        pos = skip_name(msg, pos).ok_or(Malformed)? + 4;
    }
    let records = an + ns + ar;
    for i in 0..records {
        let start = pos;
        let after_name = skip_name(msg, pos).ok_or(Malformed)?;
        let rtype = u16_at(msg, after_name).ok_or(Malformed)?;
        let rdlen = usize::from(u16_at(msg, after_name + 8).ok_or(Malformed)?);
        let rdata = after_name + 10;
        pos = rdata + rdlen;
        if pos > msg.len() {
            return Err(Malformed);
        }
        if rtype == TSIG {
            if i + 1 != records || ar == 0 || pos != msg.len() {
                return Err(Malformed);
            }
            return parse_tsig(msg, start, rdata, pos).map(Some);
        }
    }
    Ok(None)
}

/// A message that cannot be walked, or a misplaced or broken TSIG record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Malformed;

fn parse_tsig(msg: &[u8], start: usize, rdata: usize, end: usize) -> Result<TsigRecord, Malformed> {
    let (key_name, _) = read_plain_name(msg, start).ok_or(Malformed)?;
    let (algorithm_name, mut pos) = read_plain_name(msg, rdata).ok_or(Malformed)?;
    let field = |p: usize, n: usize| msg.get(p..p + n).filter(|_| p + n <= end).ok_or(Malformed);
    let time = field(pos, 6)?;
    let time_signed = time.iter().fold(0u64, |t, &b| (t << 8) | u64::from(b));
    let fudge = u16_at(field(pos + 6, 2)?, 0).ok_or(Malformed)?;
    let mac_len = usize::from(u16_at(field(pos + 8, 2)?, 0).ok_or(Malformed)?);
    pos += 10;
    let mac = field(pos, mac_len)?.to_vec();
    pos += mac_len;
    let original_id = u16_at(field(pos, 2)?, 0).ok_or(Malformed)?;
    let error = u16_at(field(pos + 2, 2)?, 0).ok_or(Malformed)?;
    let other_len = usize::from(u16_at(field(pos + 4, 2)?, 0).ok_or(Malformed)?);
    let other = field(pos + 6, other_len)?.to_vec();
    if pos + 6 + other_len != end {
        return Err(Malformed);
    }
    Ok(TsigRecord {
        start,
        key_name,
        algorithm_name,
        time_signed,
        fudge,
        mac,
        original_id,
        error,
        other,
    })
}

/// The message as it was before the TSIG record was added: the record cut off, ARCOUNT one
/// less and the original ID back (RFC 8945 4.3.1).
fn unsigned_message(msg: &[u8], tsig: &TsigRecord) -> Vec<u8> {
    let mut out = msg[..tsig.start].to_vec();
    out[..2].copy_from_slice(&tsig.original_id.to_be_bytes());
    let arcount = u16_at(&out, 10).unwrap_or(1).saturating_sub(1);
    out[10..12].copy_from_slice(&arcount.to_be_bytes());
    out
}

/// What a request's TSIG check found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Signed with this key, MAC and time good: answer signed with [`Signer`].
    Signed { key: usize, request_mac: Vec<u8> },
    /// Not signed at all.
    Unsigned,
    /// Signed but refused: answer NOTAUTH with this TSIG error (see [`error_answer`]).
    Refused(Refusal),
}

/// Why a signed request was refused, and what the error answer needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// [`error::BADKEY`], [`error::BADSIG`] or [`error::BADTIME`].
    pub error: u16,
    pub record: TsigRecord,
    /// For BADTIME: the key (the answer is signed) and the request's MAC.
    pub key: Option<usize>,
}

/// Checks the TSIG of a request against `keys` at `now` (seconds since the epoch).
pub fn verify_request(msg: &[u8], keys: &[Key], now: u64) -> Result<Verdict, Malformed> {
    let Some(record) = find(msg)? else {
        return Ok(Verdict::Unsigned);
    };
    let refused = |error, key| {
        Ok(Verdict::Refused(Refusal {
            error,
            record: record.clone(),
            key,
        }))
    };
    let Some(index) = keys.iter().position(|k| {
        k.is_named(&record.key_name) && k.algorithm.wire_name() == record.algorithm_name
    }) else {
        return refused(error::BADKEY, None);
    };
    let key = &keys[index];
    // A truncated MAC (RFC 8945 5.2.2.1) is not accepted: this server never sends one either.
    if record.mac.len() != key.algorithm.mac_len() {
        return refused(error::BADSIG, None);
    }
    let mut ctx = hmac::Context::with_key(&key.key);
    ctx.update(&unsigned_message(msg, &record));
    ctx.update(&variables(
        &record.key_name,
        key.algorithm,
        record.time_signed,
        record.fudge,
        record.error,
        &record.other,
    ));
    if !macs_equal(ctx.sign().as_ref(), &record.mac) {
        return refused(error::BADSIG, None);
    }
    if !in_time(record.time_signed, record.fudge, now) {
        return refused(error::BADTIME, Some(index));
    }
    Ok(Verdict::Signed {
        key: index,
        request_mac: record.mac,
    })
}

/// Compares two MACs in time that does not depend on where they differ (ring's own
/// comparison is deprecated for outside use).
fn macs_equal(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn in_time(signed: u64, fudge: u16, now: u64) -> bool {
    signed.abs_diff(now) <= u64::from(fudge.min(FUDGE))
}

/// The TSIG variables digested after a message (RFC 8945 4.3.3).
fn variables(
    key_name: &[u8],
    algorithm: Algorithm,
    time: u64,
    fudge: u16,
    error: u16,
    other: &[u8],
) -> Vec<u8> {
    let mut v = Vec::with_capacity(key_name.len() + 40 + other.len());
    v.extend_from_slice(key_name);
    v.extend_from_slice(&255u16.to_be_bytes()); // class ANY
    v.extend_from_slice(&0u32.to_be_bytes()); // TTL 0
    v.extend_from_slice(algorithm.wire_name());
    v.extend_from_slice(&timers(time, fudge));
    v.extend_from_slice(&error.to_be_bytes());
    v.extend_from_slice(&(other.len() as u16).to_be_bytes());
    v.extend_from_slice(other);
    v
}

/// Time signed (48 bits) and fudge: all that later messages of a stream digest (5.3.1).
fn timers(time: u64, fudge: u16) -> [u8; 8] {
    let mut t = [0u8; 8];
    t[..6].copy_from_slice(&time.to_be_bytes()[2..]);
    t[6..].copy_from_slice(&fudge.to_be_bytes());
    t
}

/// Appends a TSIG record to `msg` (which must not hold one), ARCOUNT one more.
fn append_record(msg: &mut Vec<u8>, key: &Key, time: u64, mac: &[u8], error: u16, other: &[u8]) {
    let original_id = u16_at(msg, 0).unwrap_or(0);
    let arcount = u16_at(msg, 10).unwrap_or(0).wrapping_add(1);
    msg[10..12].copy_from_slice(&arcount.to_be_bytes());
    let mut rdata = Vec::with_capacity(32 + mac.len() + other.len());
    rdata.extend_from_slice(key.algorithm.wire_name());
    rdata.extend_from_slice(&timers(time, FUDGE));
    rdata.extend_from_slice(&(mac.len() as u16).to_be_bytes());
    rdata.extend_from_slice(mac);
    rdata.extend_from_slice(&original_id.to_be_bytes());
    rdata.extend_from_slice(&error.to_be_bytes());
    rdata.extend_from_slice(&(other.len() as u16).to_be_bytes());
    rdata.extend_from_slice(other);
    msg.extend_from_slice(&key.wire_name);
    msg.extend_from_slice(&TSIG.to_be_bytes());
    msg.extend_from_slice(&255u16.to_be_bytes());
    msg.extend_from_slice(&0u32.to_be_bytes());
    msg.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    msg.extend_from_slice(&rdata);
}

/// The MAC length prefix and MAC, as a later digest starts with them.
fn prefixed(mac: &[u8]) -> Vec<u8> {
    let mut v = (mac.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(mac);
    v
}

/// Signs a request (a client's query, e.g. an SOA query or a NOTIFY) and returns its MAC,
/// which the answer's check needs ([`Signer::for_answer_of`] on the client side too).
pub fn sign_request(msg: &mut Vec<u8>, key: &Key, now: u64) -> Vec<u8> {
    let mut ctx = hmac::Context::with_key(&key.key);
    ctx.update(msg);
    ctx.update(&variables(
        &key.wire_name,
        key.algorithm,
        now,
        FUDGE,
        0,
        &[],
    ));
    let mac = ctx.sign().as_ref().to_vec();
    append_record(msg, key, now, &mac, 0, &[]);
    mac
}

/// Messages of a stream that may follow each other unsigned (RFC 8945 5.3.1: the first
/// message and at least every 100th carry a MAC).
const MAX_UNSIGNED_RUN: usize = 99;

/// Signs the answers to one signed request: the first with the request's MAC, each later one
/// of the same stream with the MAC before it (RFC 8945 5.3.1: every message is signed here).
/// On the client side it also checks them, where a later message may come unsigned: its
/// bytes are then digested with the next signed one.
pub struct Signer<'k> {
    key: &'k Key,
    previous_mac: Vec<u8>,
    first: bool,
    /// The unsigned messages received since the last signed one, as received.
    unsigned: Vec<u8>,
    unsigned_run: usize,
}

impl<'k> Signer<'k> {
    /// The signer of the answers to a request whose MAC was `request_mac`.
    pub fn for_answer_of(key: &'k Key, request_mac: &[u8]) -> Signer<'k> {
        Signer {
            key,
            previous_mac: request_mac.to_vec(),
            first: true,
            unsigned: Vec::new(),
            unsigned_run: 0,
        }
    }

    /// Signs the next answer message in place (appends the TSIG record).
    pub fn sign(&mut self, msg: &mut Vec<u8>, now: u64) {
        let mac = self.digest(msg, now, error::NOERROR, &[]);
        append_record(msg, self.key, now, &mac, error::NOERROR, &[]);
        self.previous_mac = mac;
        self.first = false;
        self.unsigned.clear();
    }

    fn digest(&self, unsigned: &[u8], time: u64, error: u16, other: &[u8]) -> Vec<u8> {
        let mut ctx = hmac::Context::with_key(&self.key.key);
        ctx.update(&prefixed(&self.previous_mac));
        ctx.update(&self.unsigned);
        ctx.update(unsigned);
        if self.first {
            ctx.update(&variables(
                &self.key.wire_name,
                self.key.algorithm,
                time,
                FUDGE,
                error,
                other,
            ));
        } else {
            ctx.update(&timers(time, FUDGE));
        }
        ctx.sign().as_ref().to_vec()
    }

    /// Checks the next signed answer (the client side of a request, e.g. an AXFR stream).
    /// Every message must be signed: a missing TSIG is an error here.
    pub fn verify(&mut self, msg: &[u8], now: u64) -> Result<(), AnswerError> {
        let record = find(msg)
            .map_err(|_| AnswerError::Malformed)?
            .ok_or(AnswerError::Unsigned)?;
        if !self.key.is_named(&record.key_name)
            || self.key.algorithm.wire_name() != record.algorithm_name
        {
            return Err(AnswerError::WrongKey);
        }
        if record.error != error::NOERROR {
            return Err(AnswerError::Error(record.error));
        }
        let expected = self.digest(
            &unsigned_message(msg, &record),
            record.time_signed,
            record.error,
            &record.other,
        );
        if !macs_equal(&expected, &record.mac) {
            return Err(AnswerError::BadSig);
        }
        if !in_time(record.time_signed, record.fudge, now) {
            return Err(AnswerError::BadTime);
        }
        self.previous_mac = record.mac;
        self.first = false;
        self.unsigned.clear();
        self.unsigned_run = 0;
        Ok(())
    }

    /// Checks the next message of a multi-message answer (an AXFR or IXFR stream, RFC 8945
    /// 5.3.1): the first must be signed; a later one may come unsigned, up to 99 in a row,
    /// and is then covered by the next signed one. [`Signer::finish`] checks the last.
    pub fn verify_next(&mut self, msg: &[u8], now: u64) -> Result<(), AnswerError> {
        if find(msg).map_err(|_| AnswerError::Malformed)?.is_some() {
            return self.verify(msg, now);
        }
        if self.first {
            return Err(AnswerError::Unsigned);
        }
        if self.unsigned_run >= MAX_UNSIGNED_RUN {
            return Err(AnswerError::TooManyUnsigned);
        }
        self.unsigned.extend_from_slice(msg);
        self.unsigned_run += 1;
        Ok(())
    }

    /// The end of a stream: its last message must have been signed (unsigned ones after the
    /// last MAC are covered by nothing).
    pub fn finish(&self) -> Result<(), AnswerError> {
        if self.first || self.unsigned_run > 0 {
            return Err(AnswerError::Unsigned);
        }
        Ok(())
    }
}

/// The name of a TSIG error code (`BADSIG`), as logs and status show it.
pub fn error_name(code: u16) -> String {
    match code {
        error::BADSIG => "BADSIG".to_string(),
        error::BADKEY => "BADKEY".to_string(),
        error::BADTIME => "BADTIME".to_string(),
        error::BADTRUNC => "BADTRUNC".to_string(),
        other => format!("error {other}"),
    }
}

/// Why a signed answer was not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    #[error("the answer is not a valid DNS message")]
    Malformed,
    #[error("the answer is not signed")]
    Unsigned,
    #[error("the answer is signed with another key")]
    WrongKey,
    #[error("the server refused our signature: TSIG {}", error_name(*.0))]
    Error(u16),
    #[error("the answer's TSIG signature is wrong")]
    BadSig,
    #[error("the answer's TSIG time is outside its fudge")]
    BadTime,
    #[error("more than 99 messages of the answer in a row carry no TSIG")]
    TooManyUnsigned,
}

/// Appends the TSIG record of a NOTAUTH answer to `answer` (header and question already
/// written, rcode set by the caller). BADKEY and BADSIG answers carry no MAC (RFC 8945
/// 5.2.1, 5.2.2); a BADTIME answer is signed and carries this server's time (5.2.3).
pub fn error_answer(answer: &mut Vec<u8>, refusal: &Refusal, keys: &[Key], now: u64) {
    let record = &refusal.record;
    match refusal.key.and_then(|k| keys.get(k)) {
        Some(key) => {
            let other = now.to_be_bytes()[2..].to_vec();
            let signer = Signer::for_answer_of(key, &record.mac);
            let mac = signer.digest(answer, record.time_signed, refusal.error, &other);
            append_record(answer, key, record.time_signed, &mac, refusal.error, &other);
        }
        None => {
            // Unsigned: the key is named as the request named it, with its algorithm.
            let original_id = u16_at(answer, 0).unwrap_or(0);
            let arcount = u16_at(answer, 10).unwrap_or(0).wrapping_add(1);
            answer[10..12].copy_from_slice(&arcount.to_be_bytes());
            let mut rdata = record.algorithm_name.clone();
            rdata.extend_from_slice(&timers(record.time_signed, FUDGE));
            rdata.extend_from_slice(&0u16.to_be_bytes());
            rdata.extend_from_slice(&original_id.to_be_bytes());
            rdata.extend_from_slice(&refusal.error.to_be_bytes());
            rdata.extend_from_slice(&0u16.to_be_bytes());
            answer.extend_from_slice(&record.key_name);
            answer.extend_from_slice(&TSIG.to_be_bytes());
            answer.extend_from_slice(&255u16.to_be_bytes());
            answer.extend_from_slice(&0u32.to_be_bytes());
            answer.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            answer.extend_from_slice(&rdata);
        }
    }
}

#[cfg(test)]
mod tests;
