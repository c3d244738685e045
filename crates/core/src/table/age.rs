//! Ages for table cells: an RFC 3339 parser (no calendar library) and ports of upstream's
//! `duration.HumanDuration` and the printers' `translateTimestampSince` (with the AGE cell built
//! on it).

use serde_json::Value;

use super::json::{get, s};

/// Unix seconds of Go's zero `time.Time` (`0001-01-01T00:00:00Z`), which `metav1.Time.IsZero`
/// reports as unset.
const GO_ZERO_TIME: i64 = -62_135_596_800;

/// Days since 1970-01-01 of a proleptic Gregorian civil date (Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn digits(b: &[u8], from: usize, n: usize) -> Option<i64> {
    let part = b.get(from..from + n)?;
    part.iter().try_fold(0i64, |acc, c| {
        c.is_ascii_digit().then(|| acc * 10 + i64::from(c - b'0'))
    })
}

/// Parses an RFC 3339 timestamp (`2024-05-01T10:00:00Z`, `…T10:00:00.123456Z`,
/// `…T12:00:00+02:00`) into Unix seconds, truncating fractions. `None` for anything else.
/// Mirrors what `metav1.Time.UnmarshalJSON` (Go `time.RFC3339`) accepts.
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[13] != b':' || b[16] != b':' {
        return None;
    }
    if !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let year = digits(b, 0, 4)?;
    let month = u32::try_from(digits(b, 5, 2)?).ok()?;
    let day = u32::try_from(digits(b, 8, 2)?).ok()?;
    let hour = digits(b, 11, 2)?;
    let minute = digits(b, 14, 2)?;
    let second = digits(b, 17, 2)?;
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let mut pos = 19;
    if b.get(pos) == Some(&b'.') {
        pos += 1;
        let start = pos;
        while b.get(pos).is_some_and(u8::is_ascii_digit) {
            pos += 1;
        }
        if pos == start {
            return None;
        }
    }
    let offset = match b.get(pos)? {
        b'Z' | b'z' if pos + 1 == b.len() => 0,
        sign @ (b'+' | b'-') if pos + 6 == b.len() && b[pos + 3] == b':' => {
            let oh = digits(b, pos + 1, 2)?;
            let om = digits(b, pos + 4, 2)?;
            if oh > 23 || om > 59 {
                return None;
            }
            let off = oh * 3600 + om * 60;
            if *sign == b'-' { -off } else { off }
        }
        _ => return None,
    };
    let days = days_from_civil(year, month, day);
    Some(days * 86_400 + hour * 3600 + minute * 60 + second - offset)
}

/// Port of `k8s.io/apimachinery/pkg/util/duration.HumanDuration`: a succinct duration with
/// about two significant figures (`45s`, `3m2s`, `10m`, `3h`, `2d5h`, `400d`, `2y10d`).
/// A duration below -1s is `<invalid>`; a small negative skew reads as `0s`.
pub fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".to_string();
    }
    if seconds < 0 {
        return "0s".to_string();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

/// The Unix seconds of a timestamp field, `None` when absent, unparseable or Go's zero time
/// (what `metav1.Time.IsZero` treats as unset).
pub fn timestamp(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_str)
        .and_then(parse_rfc3339)
        .filter(|t| *t != GO_ZERO_TIME)
}

/// Port of the printers' `translateTimestampSince` (and `translateMicroTimestampSince`):
/// the age of a timestamp, or `<unknown>` when it is unset.
pub fn since(v: Option<&Value>, now: i64) -> String {
    match timestamp(v) {
        Some(t) => human_duration(now.saturating_sub(t)),
        None => "<unknown>".to_string(),
    }
}

/// The AGE cell of an object: `translateTimestampSince(obj.CreationTimestamp)`, as every
/// upstream printer with an AGE column calls it.
pub fn created(obj: &Value, now: i64) -> Value {
    s(since(get(obj, &["metadata", "creationTimestamp"]), now))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_utc_offsets_and_fractions() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(951_782_400));
        assert_eq!(
            parse_rfc3339("2026-11-21T08:06:23.123456Z"),
            Some(1_795_248_383)
        );
        assert_eq!(
            parse_rfc3339("2026-11-21T10:06:23+02:00"),
            Some(1_795_248_383)
        );
        assert_eq!(
            parse_rfc3339("2026-11-21T07:06:23-01:00"),
            Some(1_795_248_383)
        );
        assert_eq!(parse_rfc3339("0001-01-01T00:00:00Z"), Some(GO_ZERO_TIME));
        for bad in [
            "",
            "yesterday",
            "2026-11-21",
            "2026-13-01T00:00:00Z",
            "2026-11-21T08:06:23",
            "2026-11-21T08:06:23.Z",
            "2026-11-21T08:06:23+0200",
            "2026-11-21T08:06:23Zjunk",
            "２０２６-11-21T08:06:23Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn zero_and_missing_timestamps_are_unknown() {
        assert_eq!(since(None, 100), "<unknown>");
        assert_eq!(since(Some(&Value::Null), 100), "<unknown>");
        assert_eq!(
            since(Some(&Value::from("0001-01-01T00:00:00Z")), 100),
            "<unknown>"
        );
        assert_eq!(
            since(Some(&Value::from("1970-01-01T00:00:10Z")), 100),
            "90s"
        );
    }
}
