//! Timestamps as Kubernetes writes them: RFC 3339 in UTC, whole seconds (`metav1.Time`) or
//! microseconds (`metav1.MicroTime`), computed without a calendar library.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds and microseconds since the Unix epoch for `t` (clamped at the epoch).
pub fn unix(t: SystemTime) -> (i64, u32) {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    (
        i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        d.subsec_micros(),
    )
}

/// Converts days since 1970-01-01 into a (year, month, day) civil date (Howard Hinnant's algorithm).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the inverse of [`civil_from_days`]).
pub(crate) fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from((month + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// How many days `month` (1–12) of `year` has.
pub(crate) fn days_in_month(year: i64, month: u32) -> u32 {
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    match month {
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => 31,
    }
}

/// An instant and the UTC offset it was written with, as Go's `time.Time` carries a fixed zone
/// after parsing `2024-01-01T00:00:00+05:30`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetTime {
    /// Seconds since the Unix epoch (of the instant, not of the local wall clock).
    pub secs: i64,
    /// Nanoseconds within the second, below 1,000,000,000.
    pub nanos: u32,
    /// Seconds east of UTC.
    pub offset: i32,
}

/// Go's `time.Parse(time.RFC3339, s)` (which also reads fractional seconds): `YYYY-MM-DD`, `T`,
/// `hh:mm:ss`, an optional `.` and digits (past the ninth ignored), then `Z` or `±hh:mm`. Upper
/// case `T` and `Z` only, a real date, hours below 24 and no leap second, as Go's strict parser
/// (`parseRFC3339`) checks; the looser fallback Go tries after it (single-digit hours, `,` before
/// the fraction) is not followed.
pub fn parse_rfc3339_nano(s: &str) -> Option<OffsetTime> {
    let b = s.as_bytes();
    if b.len() < 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b'T'
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<u32> {
        let part = b.get(from..to)?;
        if !part.iter().all(u8::is_ascii_digit) {
            return None;
        }
        Some(part.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
    };
    let year = i64::from(num(0, 4)?);
    let month = num(5, 7).filter(|m| (1..=12).contains(m))?;
    let day = num(8, 10).filter(|d| (1..=days_in_month(year, month)).contains(d))?;
    let hour = num(11, 13).filter(|h| *h < 24)?;
    let minute = num(14, 16).filter(|m| *m < 60)?;
    let second = num(17, 19).filter(|s| *s < 60)?;
    let mut rest = &b[19..];
    let mut nanos = 0u32;
    if rest.len() >= 2 && rest[0] == b'.' && rest[1].is_ascii_digit() {
        let digits = rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        for i in 0..9 {
            let d = rest
                .get(1 + i)
                .filter(|_| i < digits)
                .map_or(0, |c| c - b'0');
            nanos = nanos * 10 + u32::from(d);
        }
        rest = &rest[1 + digits..];
    }
    let offset = match rest {
        b"Z" => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let two = |a: u8, b: u8| -> Option<i32> {
                (a.is_ascii_digit() && b.is_ascii_digit())
                    .then(|| i32::from(a - b'0') * 10 + i32::from(b - b'0'))
            };
            let hours = two(*h1, *h2).filter(|h| *h < 24)?;
            let minutes = two(*m1, *m2).filter(|m| *m < 60)?;
            let east = (hours * 60 + minutes) * 60;
            if *sign == b'-' { -east } else { east }
        }
        _ => return None,
    };
    let local =
        days_from_civil(year, month, day) * 86_400 + i64::from(hour * 3600 + minute * 60 + second);
    Some(OffsetTime {
        secs: local - i64::from(offset),
        nanos,
        offset,
    })
}

/// Go's `time.Parse("2006-01-02", s)`: a real date, as midnight UTC (seconds since the epoch).
pub fn parse_date(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 10 || b[4] != b'-' || b[7] != b'-' {
        return None;
    }
    let num = |from: usize, to: usize| -> Option<u32> {
        let part = &b[from..to];
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| part.iter().fold(0, |n, d| n * 10 + u32::from(d - b'0')))
    };
    let year = i64::from(num(0, 4)?);
    let month = num(5, 7).filter(|m| (1..=12).contains(m))?;
    let day = num(8, 10).filter(|d| (1..=days_in_month(year, month)).contains(d))?;
    Some(days_from_civil(year, month, day) * 86_400)
}

/// Go's `t.Format(time.RFC3339Nano)`: the wall clock at the time's own offset, the fraction
/// without trailing zeros (none when whole), `Z` for a zero offset.
pub fn format_rfc3339_nano(t: OffsetTime) -> String {
    let (y, mo, d, h, mi, s) = parts(t.secs.saturating_add(i64::from(t.offset)));
    let mut out = format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}");
    if t.nanos > 0 {
        let digits = format!("{:09}", t.nanos);
        out.push('.');
        out.push_str(digits.trim_end_matches('0'));
    }
    if t.offset == 0 {
        out.push('Z');
    } else {
        let sign = if t.offset < 0 { '-' } else { '+' };
        let minutes = t.offset.unsigned_abs() / 60;
        out.push_str(&format!("{sign}{:02}:{:02}", minutes / 60, minutes % 60));
    }
    out
}

fn parts(secs: i64) -> (i64, u32, u32, i64, i64, i64) {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    (y, m, d, rem / 3600, (rem % 3600) / 60, rem % 60)
}

/// `2026-11-21T08:06:23Z` for a Unix time in seconds (`metav1.Time`).
pub fn format_rfc3339(secs: i64) -> String {
    let (y, mo, d, h, mi, s) = parts(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}Z")
}

/// `2026-11-21T08:06:23.123456Z` (`metav1.MicroTime`).
pub fn format_rfc3339_micros(secs: i64, micros: u32) -> String {
    let (y, mo, d, h, mi, s) = parts(secs);
    format!("{y:04}-{mo:02}-{d:02}T{h:02}:{mi:02}:{s:02}.{micros:06}Z")
}

/// The current time as `metav1.Time`.
pub fn now_rfc3339() -> String {
    format_rfc3339(unix(SystemTime::now()).0)
}

/// Why a duration does not parse, in Go's `time.ParseDuration` words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GoDurationError {
    #[error("time: invalid duration {}", crate::field::go_quote(.0))]
    Invalid(String),
    #[error("time: missing unit in duration {}", crate::field::go_quote(.0))]
    MissingUnit(String),
    #[error("time: unknown unit {} in duration {}", crate::field::go_quote(.unit), crate::field::go_quote(.text))]
    UnknownUnit { unit: String, text: String },
}

/// Parses Go's duration syntax (`time.ParseDuration`): an optional sign, then decimal numbers
/// each with a unit (`ns`, `us`/`µs`, `ms`, `s`, `m`, `h`), as in `1h30m`, `1.5s`, `-2m`,
/// `300ms`; `0` alone needs no unit. Returns signed nanoseconds.
///
/// Exact, as Go's: integer parts are summed in integer nanoseconds and only a fraction goes
/// through floating point, so every [`format_go_duration`] text parses back to the same value
/// (an `f64` total lost the low digits of durations over about 104 days). A value beyond
/// ±2⁶³−1 ns (−2⁶³ is allowed) is invalid.
pub fn parse_go_duration(text: &str) -> Result<i64, GoDurationError> {
    const LIMIT: u64 = 1 << 63;
    let invalid = || GoDurationError::Invalid(text.to_string());
    let (negative, mut rest) = match text.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, text.strip_prefix('+').unwrap_or(text)),
    };
    if rest == "0" {
        return Ok(0);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        if !rest.starts_with(|c: char| c == '.' || c.is_ascii_digit()) {
            return Err(invalid());
        }
        // The integer part (`leadingInt`): overflow is an invalid duration.
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let mut whole: u64 = 0;
        for digit in rest[..int_len].bytes() {
            whole = whole
                .checked_mul(10)
                .and_then(|w| w.checked_add(u64::from(digit - b'0')))
                .filter(|w| *w <= LIMIT)
                .ok_or_else(invalid)?;
        }
        rest = &rest[int_len..];
        // The fraction (`leadingFraction`): digits past what fits are ignored.
        let (mut fraction, mut scale, mut frac_len) = (0u64, 1f64, 0usize);
        if let Some(after_dot) = rest.strip_prefix('.') {
            rest = after_dot;
            frac_len = rest
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(rest.len());
            let mut overflow = false;
            for digit in rest[..frac_len].bytes() {
                if overflow {
                    continue;
                }
                match fraction
                    .checked_mul(10)
                    .and_then(|f| f.checked_add(u64::from(digit - b'0')))
                    .filter(|f| *f <= LIMIT)
                {
                    Some(f) => {
                        fraction = f;
                        scale *= 10.0;
                    }
                    None => overflow = true,
                }
            }
            rest = &rest[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            // `.` alone, or `.s`.
            return Err(invalid());
        }
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit: u64 = match &rest[..unit_len] {
            "" => return Err(GoDurationError::MissingUnit(text.to_string())),
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            unit => {
                return Err(GoDurationError::UnknownUnit {
                    unit: unit.to_string(),
                    text: text.to_string(),
                });
            }
        };
        rest = &rest[unit_len..];
        let mut value = whole
            .checked_mul(unit)
            .filter(|v| *v <= LIMIT)
            .ok_or_else(invalid)?;
        if fraction > 0 {
            // As Go: float64(f) * (float64(unit) / scale), truncated.
            value = value
                .checked_add((fraction as f64 * (unit as f64 / scale)) as u64)
                .filter(|v| *v <= LIMIT)
                .ok_or_else(invalid)?;
        }
        total = total
            .checked_add(value)
            .filter(|t| *t <= LIMIT)
            .ok_or_else(invalid)?;
    }
    if negative {
        // -2⁶³ is representable.
        return Ok(0i64.wrapping_sub_unsigned(total));
    }
    i64::try_from(total).map_err(|_| invalid())
}

/// [`parse_go_duration`] for durations that cannot be negative (flags, intervals): a negative
/// one is [`GoDurationError::Invalid`].
pub fn parse_go_duration_std(text: &str) -> Result<Duration, GoDurationError> {
    let nanos = parse_go_duration(text)?;
    u64::try_from(nanos)
        .map(Duration::from_nanos)
        .map_err(|_| GoDurationError::Invalid(text.to_string()))
}

/// Go's `time.Duration.String()` of signed nanoseconds: `1h2m3s`, `1.5s`, `300ms`, `0s`.
pub fn format_go_duration(nanos: i64) -> String {
    if nanos == 0 {
        return "0s".to_string();
    }
    let sign = if nanos < 0 { "-" } else { "" };
    let u = nanos.unsigned_abs();
    if u < 1_000_000_000 {
        let (unit, scale) = if u < 1_000 {
            ("ns", 1)
        } else if u < 1_000_000 {
            ("µs", 1_000)
        } else {
            ("ms", 1_000_000)
        };
        return format!("{sign}{}{unit}", fraction(u, scale));
    }
    let h = u / 3_600_000_000_000;
    let m = (u / 60_000_000_000) % 60;
    let secs = fraction(u % 60_000_000_000, 1_000_000_000);
    if h > 0 {
        format!("{sign}{h}h{m}m{secs}s")
    } else if m > 0 {
        format!("{sign}{m}m{secs}s")
    } else {
        format!("{sign}{secs}s")
    }
}

/// [`format_go_duration`] of a [`Duration`] (saturating at Go's largest duration).
pub fn format_duration(d: Duration) -> String {
    format_go_duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// `value / scale` with the fraction's trailing zeros dropped (`1500, 1000` → `1.5`).
fn fraction(value: u64, scale: u64) -> String {
    let whole = value / scale;
    let rest = value % scale;
    if rest == 0 {
        return whole.to_string();
    }
    let width = scale.ilog10() as usize;
    let digits = format!("{rest:0width$}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Go's own `time` package cases (format_test / time_test), both ways.
    #[test]
    fn go_durations_print_and_parse_as_go_does() {
        for (nanos, text) in [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (3_300_000_000, "3.3s"),
            (-4_400_000_000, "-4.4s"),
            (60_000_000_000, "1m0s"),
            (90_500_000_000, "1m30.5s"),
            (3_600_000_000_000, "1h0m0s"),
            (5_445_000_000_000, "1h30m45s"),
        ] {
            assert_eq!(format_go_duration(nanos), text);
            assert_eq!(parse_go_duration(text), Ok(nanos), "{text}");
        }
        for (text, nanos) in [
            ("1h30m", 5_400_000_000_000),
            ("+5s", 5_000_000_000),
            ("300ms", 300_000_000),
            ("1.5h", 5_400_000_000_000),
            ("10us", 10_000),
            (".5s", 500_000_000),
            ("0", 0),
        ] {
            assert_eq!(parse_go_duration(text), Ok(nanos), "{text}");
        }
        assert_eq!(format_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(parse_go_duration_std("1m"), Ok(Duration::from_secs(60)));
    }

    #[test]
    fn bad_durations_get_gos_messages() {
        for (text, message) in [
            ("", r#"time: invalid duration """#),
            ("ten", r#"time: invalid duration "ten""#),
            (".s", r#"time: invalid duration ".s""#),
            ("-", r#"time: invalid duration "-""#),
            ("3", r#"time: missing unit in duration "3""#),
            ("1d", r#"time: unknown unit "d" in duration "1d""#),
        ] {
            let err = parse_go_duration(text).expect_err(text);
            assert_eq!(err.to_string(), message);
        }
        assert!(parse_go_duration_std("-1s").is_err());
    }

    #[test]
    fn long_durations_parse_exactly_and_overflow_is_invalid() {
        // Found by the property tests: an f64 total lost the last nanoseconds of long durations.
        for nanos in [
            -9_030_342_937_530_653,
            i64::MAX,
            i64::MIN,
            360_000_000_000_000_001,
        ] {
            let text = format_go_duration(nanos);
            assert_eq!(parse_go_duration(&text), Ok(nanos), "{text}");
        }
        assert_eq!(parse_go_duration("2562047h47m16.854775807s"), Ok(i64::MAX));
        for text in [
            "2562047h47m16.854775808s",
            "9223372036854775808ns",
            "99999999999999999999h",
        ] {
            assert!(parse_go_duration(text).is_err(), "{text}");
        }
        assert_eq!(parse_go_duration("-9223372036854775808ns"), Ok(i64::MIN));
    }

    #[test]
    fn rfc3339_with_offsets_and_fractions_parses_and_prints_as_go_does() {
        for (text, secs, nanos, offset) in [
            ("1970-01-01T00:00:00Z", 0, 0, 0),
            ("2024-01-01T00:00:00Z", 1_704_067_200, 0, 0),
            ("2024-01-01T05:30:00+05:30", 1_704_067_200, 0, 19_800),
            ("2023-12-31T16:00:00-08:00", 1_704_067_200, 0, -28_800),
            ("2000-02-29T12:00:00.5Z", 951_825_600, 500_000_000, 0),
            ("1969-12-31T23:59:59.999999999Z", -1, 999_999_999, 0),
            ("0001-01-01T00:00:00Z", -62_135_596_800, 0, 0),
            (
                "9999-12-31T23:59:59.123456789Z",
                253_402_300_799,
                123_456_789,
                0,
            ),
        ] {
            let t = parse_rfc3339_nano(text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(
                t,
                OffsetTime {
                    secs,
                    nanos,
                    offset
                },
                "{text}"
            );
            assert_eq!(format_rfc3339_nano(t), text);
        }
        // Digits past nanoseconds are dropped; `+00:00` prints as `Z`.
        let t = parse_rfc3339_nano("2024-01-01T00:00:00.1234567891+00:00");
        assert_eq!(t.map(|t| t.nanos), Some(123_456_789));
        assert_eq!(
            t.map(format_rfc3339_nano).as_deref(),
            Some("2024-01-01T00:00:00.123456789Z")
        );
        for bad in [
            "",
            "2024-01-01",
            "2024-01-01 00:00:00Z",
            "2024-01-01t00:00:00Z",
            "2024-01-01T00:00:00z",
            "2024-02-30T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2024-01-01T24:00:00Z",
            "2024-01-01T00:00:60Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00+0530",
            "2024-01-01T00:00:00+24:00",
            "2024-13-01T00:00:00Z",
            "2024-01-01T00:00:00Zjunk",
            "+024-01-01T00:00:00Z",
            "2024-01-01T00:00:00+05:3é",
        ] {
            assert_eq!(parse_rfc3339_nano(bad), None, "{bad}");
        }
    }

    #[test]
    fn dates_parse_as_midnight_utc() {
        assert_eq!(parse_date("1970-01-02"), Some(86_400));
        assert_eq!(parse_date("2024-02-29"), Some(1_709_164_800));
        for bad in [
            "2023-02-29",
            "2024-1-01",
            "2024-01-01T00:00:00Z",
            "24-01-01",
            "",
        ] {
            assert_eq!(parse_date(bad), None, "{bad}");
        }
    }

    #[test]
    fn civil_dates_round_trip() {
        for days in [-719_162, -1, 0, 59, 60, 10_957, 2_932_896] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days, "{y}-{m}-{d}");
        }
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_in_month(1900, 2), 28);
        assert_eq!(days_in_month(2000, 2), 29);
    }

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_rfc3339(1_795_248_383), "2026-11-21T08:06:23Z");
        assert_eq!(
            format_rfc3339_micros(1_795_248_383, 42),
            "2026-11-21T08:06:23.000042Z"
        );
    }
}
