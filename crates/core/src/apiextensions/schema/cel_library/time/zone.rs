//! Time zones for the timestamp accessors, read as cel-go's `inTimeZone` reads them, without an
//! IANA database.

/// Names Go's `time.LoadLocation` resolves to UTC itself or to a zone that is always UTC.
const UTC_NAMES: [&str; 19] = [
    "",
    "UTC",
    "Etc/UTC",
    "UCT",
    "Etc/UCT",
    "Universal",
    "Etc/Universal",
    "Zulu",
    "Etc/Zulu",
    "GMT",
    "Etc/GMT",
    "GMT0",
    "Etc/GMT0",
    "GMT+0",
    "Etc/GMT+0",
    "GMT-0",
    "Etc/GMT-0",
    "Greenwich",
    "Etc/Greenwich",
];

/// cel-go's `inTimeZone`: a zone name, or (with a `:`) a numeric offset `±hh:mm` whose parts are
/// read with `strconv.Atoi`. Seconds east of UTC, or why the zone cannot be used.
pub(super) fn zone_offset(zone: &str) -> Result<i64, String> {
    let Some((hours, minutes)) = zone.split_once(':') else {
        if UTC_NAMES.contains(&zone) {
            return Ok(0);
        }
        // `Etc/GMT+5` is five hours *behind* UTC (POSIX sign convention).
        if let Some(n) = zone.strip_prefix("Etc/GMT") {
            let hours = match n.as_bytes() {
                [b'+', rest @ ..] => std::str::from_utf8(rest)
                    .ok()
                    .and_then(small)
                    .filter(|h| *h <= 12)
                    .map(|h| -h),
                [b'-', rest @ ..] => std::str::from_utf8(rest)
                    .ok()
                    .and_then(small)
                    .filter(|h| *h <= 14),
                _ => None,
            };
            if let Some(h) = hours {
                return Ok(h * 3_600);
            }
        }
        return Err(format!(
            "unknown time zone {zone} (tandem has no time-zone database: use UTC or a fixed offset such as \"+01:00\")"
        ));
    };
    let hours = go_atoi(hours)?;
    let minutes = go_atoi(minutes)?;
    if !(0..=59).contains(&minutes) {
        return Err(format!(
            "timezone offset minutes out of range [0, 59]: {zone}"
        ));
    }
    let total = hours.checked_mul(60).and_then(|h| {
        if zone.starts_with('-') {
            h.checked_sub(minutes)
        } else {
            h.checked_add(minutes)
        }
    });
    // Beyond a day either way the offset is not a time zone; Go would accept it, but nothing
    // sensible follows from it.
    match total {
        Some(m) if m.abs() <= 24 * 60 => Ok(m * 60),
        _ => Err(format!("timezone offset out of range: {zone}")),
    }
}

/// A number of one or two decimal digits, without a sign or a leading zero (`Etc/GMT+5`).
fn small(s: &str) -> Option<i64> {
    let plain = matches!(s.len(), 1 | 2)
        && s.bytes().all(|b| b.is_ascii_digit())
        && !(s.len() == 2 && s.starts_with('0'));
    plain.then(|| s.parse().ok()).flatten()
}

/// Go's `strconv.Atoi`: an optional sign and decimal digits, with its error messages.
fn go_atoi(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "strconv.Atoi: parsing {}: invalid syntax",
            crate::field::go_quote(s)
        ));
    }
    s.parse().map_err(|_| {
        format!(
            "strconv.Atoi: parsing {}: value out of range",
            crate::field::go_quote(s)
        )
    })
}
