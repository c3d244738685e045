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
fn civil_from_days(days: i64) -> (i64, u32, u32) {
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

#[cfg(test)]
mod tests {
    use super::*;

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
