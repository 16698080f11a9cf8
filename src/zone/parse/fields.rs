//! Field decoders: one token (or a run of them) → a value — escapes, domain names relative to
//! the origin, TTLs with units, bounded numbers, hex, the class and the record type (and which
//! types are refused). Shared by the directives, the record header and the RDATA.

use std::str::FromStr;

use hickory_proto::rr::{Name, RecordType};

use super::lexer::{fault, Fault, Token};
use super::{type_text, MAX_LABEL_OCTETS, MAX_NAME_OCTETS, MAX_TTL};

/// Decodes `\X` and `\DDD` escapes of a token.
pub(super) fn unescape(token: &Token) -> Result<Vec<u8>, Fault> {
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
pub(super) fn parse_name(token: &Token, origin: &Name) -> Result<Name, Fault> {
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
pub(super) fn parse_ttl(token: &Token) -> Result<u32, Fault> {
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

pub(super) fn parse_number<T: TryFrom<u64>>(
    token: &Token,
    field: &str,
    max: u64,
) -> Result<T, Fault> {
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

pub(super) fn parse_hex(tokens: &[Token], field: &str, line: u32) -> Result<Vec<u8>, Fault> {
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

pub(super) fn parse_class(token: &Token) -> Option<Result<(), Fault>> {
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

pub(super) fn parse_type(token: &Token) -> Result<RecordType, Fault> {
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
pub(super) fn refused_type(rtype: RecordType) -> Option<String> {
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
