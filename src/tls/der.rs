//! Just enough DER to find an X.509 certificate's validity period (RFC 5280 §4.1): walks
//! Certificate → tbsCertificate → (version, serialNumber, signature, issuer) → validity.
//! rustls checks the certificate itself; this only reads the two dates. Bounds-checked
//! throughout: any malformed input is an error, never a panic.

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
const VERSION: u8 = 0xA0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// One DER element: (tag, contents, the rest of the input after it).
fn element(input: &[u8]) -> Result<(u8, &[u8], &[u8]), &'static str> {
    let (&tag, rest) = input.split_first().ok_or("truncated")?;
    let (&first, rest) = rest.split_first().ok_or("truncated")?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let n = usize::from(first & 0x7F);
        if n == 0 || n > 4 || rest.len() < n {
            return Err("bad length");
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        (len, &rest[n..])
    };
    if rest.len() < len {
        return Err("truncated");
    }
    Ok((tag, &rest[..len], &rest[len..]))
}

fn expect(input: &[u8], want: u8) -> Result<(&[u8], &[u8]), &'static str> {
    let (tag, contents, rest) = element(input)?;
    if tag != want {
        return Err("unexpected element");
    }
    Ok((contents, rest))
}

/// The certificate's notBefore and notAfter, Unix seconds.
pub fn validity(cert: &[u8]) -> Result<(i64, i64), &'static str> {
    let (certificate, _) = expect(cert, SEQUENCE)?;
    let (tbs, _) = expect(certificate, SEQUENCE)?;
    let mut rest = tbs;
    if rest.first() == Some(&VERSION) {
        rest = element(rest)?.2;
    }
    rest = expect(rest, INTEGER)?.1; // serialNumber
    rest = expect(rest, SEQUENCE)?.1; // signature algorithm
    rest = expect(rest, SEQUENCE)?.1; // issuer
    let (validity, _) = expect(rest, SEQUENCE)?;
    let (not_before, rest) = time(validity)?;
    let (not_after, _) = time(rest)?;
    Ok((not_before, not_after))
}

/// A UTCTime (YYMMDDHHMMSSZ) or GeneralizedTime (YYYYMMDDHHMMSSZ) as Unix seconds.
fn time(input: &[u8]) -> Result<(i64, &[u8]), &'static str> {
    let (tag, text, rest) = element(input)?;
    let digits = |s: &[u8]| -> Result<i64, &'static str> {
        s.iter().try_fold(0i64, |acc, &b| {
            if b.is_ascii_digit() {
                Ok(acc * 10 + i64::from(b - b'0'))
            } else {
                Err("bad time")
            }
        })
    };
    let (year, rest_of_text) = match (tag, text.len()) {
        (UTC_TIME, 13) => {
            let yy = digits(&text[..2])?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        (GENERALIZED_TIME, 15) => (digits(&text[..4])?, &text[4..]),
        _ => return Err("unsupported time format"),
    };
    if rest_of_text.last() != Some(&b'Z') {
        return Err("time not in UTC");
    }
    let field = |i: usize| digits(&rest_of_text[i..i + 2]);
    let (month, day, hour, minute, second) =
        (field(0)?, field(2)?, field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return Err("bad time");
    }
    let days = crate::civil::days_from_civil(year, month, day);
    Ok((days * 86_400 + hour * 3600 + minute * 60 + second, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_of_both_kinds() {
        let utc = b"\x17\x0d261202003000Z";
        assert_eq!(time(utc).map(|t| t.0), Ok(20_789 * 86_400 + 1800));
        let generalized = b"\x18\x0f20500101000000Z";
        assert_eq!(
            time(generalized).map(|t| t.0),
            Ok(crate::civil::days_from_civil(2050, 1, 1) * 86_400)
        );
        assert!(time(b"\x17\x0d2612020030000").is_err());
        assert!(time(b"\x17\x0d26120200300").is_err());
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for input in [
            &b""[..],
            b"\x30",
            b"\x30\x85\x01\x02\x03\x04\x05",
            b"\x30\x02\x30\x00",
            b"\x30\x82\xff\xff",
        ] {
            assert!(validity(input).is_err());
        }
    }
}
