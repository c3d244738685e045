//! Cron schedules as upstream's CronJob controller reads them: `github.com/robfig/cron/v3`'s
//! `ParseStandard` (five fields, names for months and weekdays, `*`, `?`, ranges, steps, lists,
//! the `@yearly` … `@hourly` descriptors, `@every <duration>`, a `TZ=`/`CRON_TZ=` prefix) and its
//! `SpecSchedule.Next`, evaluated in a time zone.
//!
//! As robfig, when both day-of-month and day-of-week are restricted (neither starts with `*` or
//! `?`) a day matching either runs; otherwise both must match.

use std::time::Duration;

use jiff::civil::{Date, DateTime, Time};
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp, ToSpan};

/// Why a schedule did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CronError(pub String);

/// A five-field schedule as bit sets (bit *n* set = value *n* matches).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecSchedule {
    minute: u64,
    hour: u64,
    dom: u64,
    month: u64,
    dow: u64,
    dom_star: bool,
    dow_star: bool,
}

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Five fields or a descriptor.
    Spec(SpecSchedule),
    /// `@every <duration>`: a fixed delay after the previous time.
    Every(Duration),
}

/// A schedule and the time zone of its `TZ=` prefix, if any.
#[derive(Debug, Clone)]
pub struct Parsed {
    pub schedule: Schedule,
    pub time_zone: Option<TimeZone>,
}

const MONTHS: &[&str] = &[
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];
const DAYS: &[&str] = &["sun", "mon", "tue", "wed", "thu", "fri", "sat"];

fn value(s: &str, names: &[&str], offset: u32) -> Result<u32, CronError> {
    let lower = s.to_ascii_lowercase();
    if let Some(i) = names.iter().position(|n| *n == lower) {
        return Ok(u32::try_from(i).unwrap_or(0) + offset);
    }
    s.parse::<u32>()
        .map_err(|_| CronError(format!("failed to parse int from {s}")))
}

/// One field (`getField`): returns the bit set and whether it was a plain `*`/`?`.
fn field(
    expr: &str,
    min: u32,
    max: u32,
    names: &[&str],
    offset: u32,
) -> Result<(u64, bool), CronError> {
    let mut bits = 0u64;
    let mut star = false;
    for part in expr.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                Some(
                    s.parse::<u32>()
                        .map_err(|_| CronError(format!("failed to parse int from {s}")))?,
                ),
            ),
            None => (part, None),
        };
        let (mut lo, mut hi, mut is_star) = if range == "*" || range == "?" {
            (min, max, true)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a, names, offset)?, value(b, names, offset)?, false)
        } else {
            let v = value(range, names, offset)?;
            (v, v, false)
        };
        if let Some(step) = step {
            if step == 0 {
                return Err(CronError(format!(
                    "step of range should be a positive number: {part}"
                )));
            }
            if !is_star && !range.contains('-') {
                hi = max;
            }
            if step > 1 {
                is_star = false;
            }
            if lo < min {
                lo = min;
            }
        }
        if lo < min {
            return Err(CronError(format!(
                "beginning of range ({lo}) below minimum ({min}): {part}"
            )));
        }
        if hi > max {
            return Err(CronError(format!(
                "end of range ({hi}) above maximum ({max}): {part}"
            )));
        }
        if lo > hi {
            return Err(CronError(format!(
                "beginning of range ({lo}) beyond end of range ({hi}): {part}"
            )));
        }
        let step = step.unwrap_or(1);
        let mut v = lo;
        while v <= hi {
            bits |= 1 << v;
            // A step as large as `u32::MAX` (`1/4294967295`) ends the range rather than
            // overflowing; robfig's `uint` loop cannot overflow for the same input.
            let Some(next) = v.checked_add(step) else {
                break;
            };
            v = next;
        }
        star |= is_star;
    }
    Ok((bits, star))
}

fn parse_duration(s: &str) -> Option<Duration> {
    tandem_core::time::parse_go_duration_std(s).ok()
}

/// Parses a schedule as `cron.ParseStandard`.
pub fn parse(spec: &str) -> Result<Parsed, CronError> {
    let mut spec = spec.trim();
    let mut time_zone = None;
    if spec.starts_with("TZ=") || spec.starts_with("CRON_TZ=") {
        let i = spec.find(' ').unwrap_or(spec.len());
        let name = spec[..i]
            .split_once('=')
            .map(|(_, l)| l)
            .unwrap_or_default();
        time_zone = Some(TimeZone::get(name).map_err(|_| {
            CronError(format!(
                "provided bad location {name}: unknown time zone {name}"
            ))
        })?);
        spec = spec[i..].trim();
    }
    let fields: Vec<&str> = if let Some(d) = spec.strip_prefix('@') {
        match d {
            "yearly" | "annually" => vec!["0", "0", "1", "1", "*"],
            "monthly" => vec!["0", "0", "1", "*", "*"],
            "weekly" => vec!["0", "0", "*", "*", "0"],
            "daily" | "midnight" => vec!["0", "0", "*", "*", "*"],
            "hourly" => vec!["0", "*", "*", "*", "*"],
            d if d.starts_with("every ") => {
                let dur = parse_duration(d["every ".len()..].trim())
                    .ok_or_else(|| CronError(format!("failed to parse duration {spec}")))?;
                return Ok(Parsed {
                    schedule: Schedule::Every(dur.max(Duration::from_secs(1))),
                    time_zone,
                });
            }
            _ => return Err(CronError(format!("unrecognized descriptor: {spec}"))),
        }
    } else {
        spec.split_whitespace().collect()
    };
    if fields.len() != 5 {
        return Err(CronError(format!(
            "expected exactly 5 fields, found {}: {spec}",
            fields.len()
        )));
    }
    let (minute, _) = field(fields[0], 0, 59, &[], 0)?;
    let (hour, _) = field(fields[1], 0, 23, &[], 0)?;
    let (dom, dom_star) = field(fields[2], 1, 31, &[], 0)?;
    let (month, _) = field(fields[3], 1, 12, MONTHS, 1)?;
    let (dow, dow_star) = field(fields[4], 0, 6, DAYS, 0)?;
    Ok(Parsed {
        schedule: Schedule::Spec(SpecSchedule {
            minute,
            hour,
            dom,
            month,
            dow,
            dom_star,
            dow_star,
        }),
        time_zone,
    })
}

fn has(bits: u64, v: i8) -> bool {
    u32::try_from(v).is_ok_and(|v| v < 64 && bits & (1 << v) != 0)
}

impl SpecSchedule {
    fn day_matches(&self, d: Date) -> bool {
        let dom = has(self.dom, d.day());
        let dow = has(self.dow, d.weekday().to_sunday_zero_offset());
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }
}

impl Schedule {
    /// The first activation strictly after `after`, in `tz`; `None` when there is none within
    /// five years (robfig's limit), e.g. `0 0 30 2 *`.
    pub fn next(&self, after: Timestamp, tz: &TimeZone) -> Option<Timestamp> {
        let s = match self {
            Schedule::Every(d) => {
                let d = SignedDuration::try_from(*d).ok()?;
                let t = after.checked_add(d).ok()?;
                return Timestamp::from_second(t.as_second()).ok();
            }
            Schedule::Spec(s) => s,
        };
        let local = after.to_zoned(tz.clone()).datetime();
        let start_date = local.date();
        for day in 0..(366 * 5) {
            let date = start_date.checked_add(day.days()).ok()?;
            if !has(s.month, date.month()) || !s.day_matches(date) {
                continue;
            }
            for hour in 0..24i8 {
                if !has(s.hour, hour) {
                    continue;
                }
                for minute in 0..60i8 {
                    if !has(s.minute, minute) {
                        continue;
                    }
                    let dt = DateTime::from_parts(date, Time::new(hour, minute, 0, 0).ok()?);
                    if dt <= local.with().second(0).subsec_nanosecond(0).build().ok()? {
                        continue;
                    }
                    let Ok(z) = tz.to_ambiguous_zoned(dt).compatible() else {
                        continue;
                    };
                    if z.timestamp() > after {
                        return Some(z.timestamp());
                    }
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn next(spec: &str, after: &str, tz: &str) -> Option<String> {
        let p = parse(spec).ok()?;
        let tz = TimeZone::get(tz).ok()?;
        p.schedule.next(ts(after), &tz).map(|t| t.to_string())
    }

    #[test]
    fn standard_fields_and_descriptors_give_the_next_time() {
        assert_eq!(
            next("*/15 * * * *", "2024-01-01T10:07:30Z", "UTC").as_deref(),
            Some("2024-01-01T10:15:00Z")
        );
        assert_eq!(
            next("@hourly", "2024-01-01T10:00:00Z", "UTC").as_deref(),
            Some("2024-01-01T11:00:00Z")
        );
        assert_eq!(
            next("0 0 1 JAN *", "2024-03-01T00:00:00Z", "UTC").as_deref(),
            Some("2025-01-01T00:00:00Z")
        );
        assert_eq!(
            next("30 9 * * mon-fri", "2024-01-06T00:00:00Z", "UTC").as_deref(),
            Some("2024-01-08T09:30:00Z")
        );
        assert_eq!(
            next("@every 90m", "2024-01-01T10:00:00Z", "UTC").as_deref(),
            Some("2024-01-01T11:30:00Z")
        );
        assert_eq!(next("0 0 30 2 *", "2024-01-01T00:00:00Z", "UTC"), None);
    }

    #[test]
    fn a_step_of_u32_max_selects_only_the_range_start() {
        // Found by crates/controllers/tests/fuzz_cron.rs: `1 + u32::MAX` overflowed.
        let Ok(Parsed {
            schedule: Schedule::Spec(spec),
            ..
        }) = parse("1/4294967295 * * * *")
        else {
            panic!("the schedule parses");
        };
        assert_eq!(spec.minute, 1 << 1);
    }

    #[test]
    fn restricted_day_of_month_and_week_match_either() {
        // The 15th or any Monday: 2024-01-08 is a Monday before the 15th.
        assert_eq!(
            next("0 0 15 * 1", "2024-01-02T00:00:00Z", "UTC").as_deref(),
            Some("2024-01-08T00:00:00Z")
        );
        // With a star in day-of-month, only Mondays.
        assert_eq!(
            next("0 0 * * 1", "2024-01-02T00:00:00Z", "UTC").as_deref(),
            Some("2024-01-08T00:00:00Z")
        );
    }

    #[test]
    fn schedules_are_evaluated_in_their_time_zone() {
        assert_eq!(
            next("0 9 * * *", "2024-01-01T12:00:00Z", "Asia/Tokyo").as_deref(),
            Some("2024-01-02T00:00:00Z")
        );
        assert_eq!(
            next(
                "TZ=America/New_York 0 9 * * *",
                "2024-07-01T00:00:00Z",
                "UTC"
            )
            .map(|_| ()),
            Some(())
        );
        // 02:30 does not exist on 2024-03-10 in New York; it runs at 03:30 EDT (07:30Z).
        assert_eq!(
            next("30 2 * * *", "2024-03-10T05:00:00Z", "America/New_York").as_deref(),
            Some("2024-03-10T07:30:00Z")
        );
    }

    #[test]
    fn invalid_schedules_are_refused() {
        for bad in [
            "* * * *",
            "60 * * * *",
            "* * * * 7",
            "@fortnightly",
            "*/0 * * * *",
            "TZ=Nowhere/City * * * * *",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
