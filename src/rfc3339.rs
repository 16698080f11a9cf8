//! RFC 3339 timestamps: formatting an instant as UTC (`2024-03-01T12:00:00Z`, for history,
//! status and feeds' `time`) and parsing one back, offsets and fractions included.
//!
//! Written here rather than taken from a crate (`chrono` is only a transitive dependency): the
//! parser's errors say which field is wrong without echoing the value, which load-feed errors
//! rely on, and the whole is two small functions with the tests below. The calendar arithmetic
//! (dates to days and back) lives in [`crate::civil`].

use std::time::{Duration, SystemTime};

use crate::civil;

/// RFC 3339 UTC with second precision, e.g. `2024-03-01T12:00:00Z` (times before 1970 read
/// as 1970-01-01T00:00:00Z).
pub fn format_utc(time: SystemTime) -> String {
    let secs = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rest) = (secs / 86_400, secs % 86_400);
    // Lossless: u64::MAX seconds are about 2.1e14 days.
    let (year, month, day) = civil::civil_from_days(days as i64);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}

/// RFC 3339 UTC with millisecond precision, e.g. `2024-03-01T12:00:00.250Z` (for values read
/// back by a machine, where a second's rounding would age them).
pub fn format_utc_millis(time: SystemTime) -> String {
    let millis = time
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_millis());
    let whole = format_utc(time);
    format!("{}.{millis:03}Z", whole.trim_end_matches('Z'))
}

/// Parses an RFC 3339 time, `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`; `t`, `z` and a space for
/// `T` are accepted as the RFC allows. A leap second (`:60`) reads as the next second. Times
/// before 1970 are refused. The error says what is wrong, without the value.
pub fn parse(text: &str) -> Result<SystemTime, String> {
    let mut cursor = Cursor {
        bytes: text.as_bytes(),
        at: 0,
    };
    let year = cursor.number(4, "year")?;
    cursor.expect(b"-", "'-' after the year")?;
    let month = cursor.number(2, "month")?;
    cursor.expect(b"-", "'-' after the month")?;
    let day = cursor.number(2, "day")?;
    cursor.expect(b"Tt ", "'T' between date and time")?;
    let hour = cursor.number(2, "hour")?;
    cursor.expect(b":", "':' after the hour")?;
    let minute = cursor.number(2, "minute")?;
    cursor.expect(b":", "':' after the minute")?;
    let second = cursor.number(2, "second")?;
    let nanos = cursor.fraction()?;
    let offset_secs = cursor.offset()?;
    if cursor.at != cursor.bytes.len() {
        return Err("unexpected text after the offset".into());
    }
    check_range("month", month, 1, 12)?;
    // 28..=31, so the cast is exact.
    let month_length = civil::days_in_month(i64::from(year), i64::from(month)) as u32;
    check_range("day", day, 1, month_length)?;
    check_range("hour", hour, 0, 23)?;
    check_range("minute", minute, 0, 59)?;
    check_range("second", second, 0, 60)?;
    let local = civil::days_from_civil(i64::from(year), i64::from(month), i64::from(day)) * 86_400
        + i64::from(hour * 3600 + minute * 60 + second);
    let utc = local - offset_secs;
    let secs = u64::try_from(utc).map_err(|_| "before 1970".to_string())?;
    Ok(SystemTime::UNIX_EPOCH + Duration::new(secs, nanos))
}

struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn number(&mut self, digits: usize, what: &str) -> Result<u32, String> {
        let end = self.at + digits;
        let field = self
            .bytes
            .get(self.at..end)
            .filter(|f| f.iter().all(u8::is_ascii_digit))
            .ok_or_else(|| format!("{what}: expected {digits} digits"))?;
        self.at = end;
        Ok(field.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
    }

    fn expect(&mut self, allowed: &[u8], what: &str) -> Result<u8, String> {
        match self.bytes.get(self.at) {
            Some(b) if allowed.contains(b) => {
                self.at += 1;
                Ok(*b)
            }
            _ => Err(format!("expected {what}")),
        }
    }

    /// Optional `.digits`, as nanoseconds (digits past the ninth are dropped).
    fn fraction(&mut self) -> Result<u32, String> {
        if self.bytes.get(self.at) != Some(&b'.') {
            return Ok(0);
        }
        self.at += 1;
        let digits = self.bytes[self.at..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            return Err("expected digits after '.'".into());
        }
        let mut nanos = 0;
        for (i, d) in self.bytes[self.at..self.at + digits].iter().enumerate() {
            if i < 9 {
                nanos = nanos * 10 + u32::from(d - b'0');
            }
        }
        for _ in digits..9 {
            nanos *= 10;
        }
        self.at += digits;
        Ok(nanos)
    }

    /// `Z` or `±HH:MM`, as seconds east of UTC.
    fn offset(&mut self) -> Result<i64, String> {
        let sign = match self.expect(b"Zz+-", "'Z' or a '±HH:MM' offset")? {
            b'+' => 1,
            b'-' => -1,
            _ => return Ok(0),
        };
        let hours = self.number(2, "offset hours")?;
        self.expect(b":", "':' in the offset")?;
        let minutes = self.number(2, "offset minutes")?;
        check_range("offset hours", hours, 0, 23)?;
        check_range("offset minutes", minutes, 0, 59)?;
        Ok(sign * i64::from(hours * 3600 + minutes * 60))
    }
}

fn check_range(what: &str, value: u32, low: u32, high: u32) -> Result<(), String> {
    if (low..=high).contains(&value) {
        Ok(())
    } else {
        Err(format!("{what} {value} is not in {low}..={high}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-11-30T10:00:00Z.
    const FEED_TIME: u64 = 1_796_032_800;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn secs(text: &str) -> u64 {
        parse(text)
            .unwrap()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs()
    }

    #[test]
    fn rfc3339_matches_known_instants() {
        assert_eq!(secs("1970-01-01T00:00:00Z"), 0);
        assert_eq!(secs("2000-02-29T12:34:56Z"), 951_827_696);
        assert_eq!(secs("2026-11-30T10:00:00Z"), FEED_TIME);
        assert_eq!(secs("2026-11-30T11:00:00+01:00"), FEED_TIME);
        assert_eq!(secs("2026-11-30T04:30:00-05:30"), FEED_TIME);
        assert_eq!(secs("2026-11-30t10:00:00z"), FEED_TIME);
        assert_eq!(secs("2026-11-30 10:00:00Z"), FEED_TIME);
        assert_eq!(secs("2016-12-31T23:59:60Z"), secs("2017-01-01T00:00:00Z"));
        assert_eq!(
            parse("2026-11-30T10:00:00.25Z").unwrap(),
            at(FEED_TIME) + Duration::from_millis(250)
        );
        assert_eq!(
            parse("2026-11-30T10:00:00.1234567891Z").unwrap(),
            at(FEED_TIME) + Duration::from_nanos(123_456_789)
        );
    }

    #[test]
    fn rfc3339_round_trips_with_the_formatter() {
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        for _ in 0..2000 {
            seed = xorshift(seed);
            let t = at(seed % 8_000_000_000);
            let text = format_utc(t);
            assert_eq!(parse(&text), Ok(t), "{text}");
        }
    }

    #[test]
    fn rfc3339_refuses_malformed_times() {
        for text in [
            "",
            "2026-11-30",
            "2026-11-30T10:00:00",
            "2026-11-30T10:00Z",
            "2026-02-29T10:00:00Z",
            "1900-02-29T10:00:00Z",
            "2026-04-31T10:00:00Z",
            "2026-00-10T10:00:00Z",
            "2026-11-00T10:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T10:60:00Z",
            "2026-11-30T10:00:61Z",
            "2026-11-30T10:00:00.Z",
            "2026-11-30T10:00:00+0100",
            "2026-11-30T10:00:00+24:00",
            "2026-11-30T10:00:00Z ",
            "2026-11-30T10:00:00ZZ",
            "+026-11-30T10:00:00Z",
            "1969-12-31T23:59:59Z",
            "1970-01-01T00:30:00+01:00",
            "２026-11-30T10:00:00Z",
        ] {
            assert!(parse(text).is_err(), "{text} accepted");
        }
        assert!(parse("2024-02-29T10:00:00Z").is_ok());
        assert!(parse("2000-02-29T10:00:00Z").is_ok());
    }

    #[test]
    fn dates_are_gregorian() {
        assert_eq!(format_utc(at(0)), "1970-01-01T00:00:00Z");
        let later = at(86_400) + Duration::from_millis(250);
        assert_eq!(format_utc_millis(later), "1970-01-02T00:00:00.250Z");
        assert_eq!(parse(&format_utc_millis(later)), Ok(later));
        assert_eq!(format_utc(at(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(at(4_107_542_399)), "2100-02-28T23:59:59Z");
        assert_eq!(format_utc(at(4_107_542_400)), "2100-03-01T00:00:00Z");
        assert_eq!(
            format_utc(SystemTime::UNIX_EPOCH - Duration::from_secs(5)),
            "1970-01-01T00:00:00Z"
        );
    }
    fn xorshift(mut x: u64) -> u64 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}
