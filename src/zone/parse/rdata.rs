//! RDATA: a record's text fields → wire format. Name-bearing types are encoded here (with the
//! origin completing relative names); a few complex, name-free types go through hickory's text
//! parsers; RFC 3597 `\# LEN HEX` is accepted for any type and checked against its wire form.

use std::net::{Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::{Name, RData, RecordType};
use hickory_proto::serialize::binary::{
    BinDecoder, BinEncodable, BinEncoder, NameEncoding, Restrict,
};

use super::fields::{parse_hex, parse_name, parse_number, parse_ttl, unescape};
use super::lexer::{fault, Fault, Token};
use super::{type_text, MAX_CHAR_STRING_OCTETS, MAX_RDATA_OCTETS};

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

pub(super) fn push_name(wire: &mut Vec<u8>, name: &Name) {
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

pub(super) fn rdata_to_wire(
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
