//! Calendar arithmetic of the proleptic Gregorian calendar: a date to days since 1970-01-01 and
//! back, leap years, month lengths. The one home for it: RFC 3339 timestamps
//! ([`crate::rfc3339`]) and X.509 validity dates (`tls::der`) both use it.
//!
//! Howard Hinnant's algorithms ("chrono-Compatible Low-Level Date Algorithms"): count in
//! 400-year eras starting on 1 March, where the leap day falls at the end of a year. Exact for
//! every date, before 1970 (negative days) and after; no tables, no time zones.

/// Days in one 400-year era of the Gregorian calendar.
const DAYS_PER_ERA: i64 = 146_097;
/// 1970-01-01 counted in days from 0000-03-01.
const EPOCH_FROM_MARCH_0000: i64 = 719_468;

/// Days since 1970-01-01 of a date (negative before 1970). `month` is 1..=12; `day` is not
/// checked against the month's length (see [`days_in_month`]).
pub fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * DAYS_PER_ERA + day_of_era - EPOCH_FROM_MARCH_0000
}

/// Year, month (1..=12) and day (1..=31) of a count of days since 1970-01-01; the inverse of
/// [`days_from_civil`].
pub fn civil_from_days(days_since_epoch: i64) -> (i64, i64, i64) {
    let z = days_since_epoch + EPOCH_FROM_MARCH_0000;
    let era = z.div_euclid(DAYS_PER_ERA);
    let day_of_era = z - era * DAYS_PER_ERA;
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = era * 400 + year_of_era + i64::from(month <= 2);
    (year, month, day)
}

/// Whether `year` has a 29 February.
pub fn is_leap_year(year: i64) -> bool {
    year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
}

/// Days in `month` (1..=12) of `year`.
pub fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap_year(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2026, 12, 2), 20_789);
    }

    #[test]
    fn dates_of_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(951_782_400 / 86_400), (2000, 2, 29));
        assert_eq!(civil_from_days(4_107_542_399 / 86_400), (2100, 2, 28));
        assert_eq!(civil_from_days(4_107_542_400 / 86_400), (2100, 3, 1));
        assert_eq!(civil_from_days(20_789), (2026, 12, 2));
    }

    #[test]
    fn leap_years_and_month_lengths() {
        assert!(is_leap_year(2000) && is_leap_year(2024) && is_leap_year(0));
        assert!(!is_leap_year(1900) && !is_leap_year(2100) && !is_leap_year(2026));
        assert_eq!(days_in_month(2024, 2), 29);
        assert_eq!(days_in_month(1900, 2), 28);
        assert_eq!(days_in_month(2026, 4), 30);
        assert_eq!(days_in_month(2026, 12), 31);
    }

    /// Every day from 0000-03-01 to 9999-12-31 (and a margin around it) maps to a valid date
    /// that maps back to it, and consecutive days are consecutive dates.
    #[test]
    fn days_and_dates_round_trip() {
        let first = days_from_civil(-10, 1, 1);
        let last = days_from_civil(10_010, 12, 31);
        let mut previous = civil_from_days(first - 1);
        for days in first..=last {
            let (year, month, day) = civil_from_days(days);
            assert!((1..=12).contains(&month), "{days}: month {month}");
            assert!(
                (1..=days_in_month(year, month)).contains(&day),
                "{days}: {year}-{month}-{day}"
            );
            assert_eq!(
                days_from_civil(year, month, day),
                days,
                "{year}-{month}-{day}"
            );
            let next_of_previous = if previous.2 < days_in_month(previous.0, previous.1) {
                (previous.0, previous.1, previous.2 + 1)
            } else if previous.1 < 12 {
                (previous.0, previous.1 + 1, 1)
            } else {
                (previous.0 + 1, 1, 1)
            };
            assert_eq!((year, month, day), next_of_previous, "{days}");
            previous = (year, month, day);
        }
    }
}
